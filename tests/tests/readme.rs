//! The README's claims, held to the code: a newcomer reads it in five
//! minutes (at most 200 lines, fences closed), every link and script it
//! names exists, the function and crate counts are the template's and the
//! tree's, every `cargo run -p` names a package of the workspace, and its
//! test command is the one CI runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("README.md")
}

/// The directories right under `dir`.
fn dirs(dir: &str) -> BTreeSet<String> {
    std::fs::read_dir(root().join(dir))
        .expect("a directory")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The number written just before `noun` ("13 arm64 functions", "eight
/// crates"), in digits or words.
fn count_before(text: &str, noun: &str) -> usize {
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    let at = text
        .find(noun)
        .unwrap_or_else(|| panic!("the README says how many {noun}"));
    let word = text[..at].split_whitespace().last().expect("a count");
    word.parse()
        .ok()
        .or_else(|| words.iter().position(|w| *w == word))
        .unwrap_or_else(|| panic!("{word:?} before {noun:?} is not a count"))
}

#[test]
fn the_readme_is_read_in_five_minutes() {
    let text = readme();
    let lines = text.lines().count();
    assert!(lines <= 200, "the README has {lines} lines, over 200");
    let fences = text.lines().filter(|l| l.trim_start().starts_with("```")).count();
    assert_eq!(fences % 2, 0, "a code fence is left open");
}

#[test]
fn every_link_and_script_the_readme_names_exists() {
    let text = readme();
    let mut checked = 0;
    for (i, _) in text.match_indices("](") {
        let rest = &text[i + 2..];
        let target = &rest[..rest.find(')').expect("a closed link")];
        if target.starts_with("http") {
            continue;
        }
        let path = target.split('#').next().unwrap_or_default();
        assert!(
            root().join(path).exists(),
            "the README links to {target}, which is missing"
        );
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} links read");
    for (i, _) in text.match_indices("scripts/") {
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "/-_.".contains(*c))
            .collect();
        let name = name.trim_end_matches('.');
        if name.ends_with(".sh") {
            let path = root().join(name);
            assert!(path.is_file(), "the README names {name}, which is missing");
        }
    }
}

#[test]
fn the_readmes_counts_are_the_templates_and_the_trees() {
    let text = readme();
    let template = std::fs::read_to_string(root().join("infra/template.yaml")).expect("the template");
    let functions = template.matches("Type: AWS::Serverless::Function").count();
    let binaries: BTreeSet<&str> = template
        .lines()
        .filter_map(|l| l.trim().strip_prefix("BuildProperties: { Binary: "))
        .map(|b| b.trim_end_matches(" }"))
        .collect();
    assert_eq!(count_before(&text, "arm64 functions"), functions);
    assert_eq!(count_before(&text, "binaries in"), binaries.len());
    let in_functions = dirs("functions");
    assert_eq!(
        binaries.iter().map(|b| (*b).to_owned()).collect::<BTreeSet<_>>(),
        in_functions,
        "the template's binaries are functions/'s"
    );
    assert_eq!(count_before(&text, "crates under `shared/`"), dirs("shared").len());
}

/// The crates the README's layout names under `shared/` are the folders
/// there, and each is a member of the workspace.
#[test]
fn the_crates_the_readme_names_are_the_workspaces() {
    let text = readme();
    let line = text
        .lines()
        .find(|l| l.starts_with("shared/") && l.contains("the library crates:"))
        .expect("the layout's line for shared/");
    let named: BTreeSet<String> = line
        .split_once("the library crates:")
        .map(|(_, list)| list.split(',').map(|n| n.trim().to_owned()).collect())
        .unwrap_or_default();
    assert_eq!(named, dirs("shared"), "the README's crates are shared/'s folders");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("the workspace manifest");
    for crate_dir in &named {
        assert!(
            manifest.contains(&format!("\"shared/{crate_dir}\"")),
            "shared/{crate_dir} is a workspace member"
        );
    }
}

#[test]
fn every_package_the_readme_runs_is_in_the_workspace() {
    let text = readme();
    let mut names = BTreeSet::new();
    for dir in [
        "functions",
        "shared",
        "local",
        "ops",
        "bench",
        "conformance",
        "sim",
        "tests",
    ] {
        let manifests: Vec<PathBuf> = if root().join(dir).join("Cargo.toml").is_file() {
            vec![root().join(dir).join("Cargo.toml")]
        } else {
            dirs(dir)
                .iter()
                .map(|d| root().join(dir).join(d).join("Cargo.toml"))
                .collect()
        };
        for manifest in manifests.iter().filter(|m| m.is_file()) {
            let toml = std::fs::read_to_string(manifest).expect("a manifest");
            if let Some(line) = toml.lines().find(|l| l.starts_with("name = ")) {
                names.insert(line.trim_start_matches("name = ").trim_matches('"').to_owned());
            }
        }
    }
    let mut checked = 0;
    for (i, _) in text.match_indices("cargo run -p ") {
        let name: String = text[i + "cargo run -p ".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        assert!(
            names.contains(&name),
            "the README runs package {name}, not in {names:?}"
        );
        checked += 1;
    }
    assert!(checked > 0, "no `cargo run -p` read");
}

#[test]
fn the_readmes_test_command_is_the_one_ci_runs() {
    let text = readme();
    let test = text.split("## Test").nth(1).expect("a Test section");
    assert!(
        test.contains("```sh\nscripts/test.sh\n```"),
        "the Test section's command"
    );
    let ci = std::fs::read_to_string(root().join(".ci/run")).expect(".ci/run");
    assert!(ci.contains(" scripts/test.sh\n"), "CI runs the README's test command");
    let run = text.split("## Run it locally").nth(1).expect("a Run section");
    assert!(
        run.contains("```sh\nscripts/run-local.sh\n```"),
        "the Run section's command"
    );
}

/// docs/clients.md quotes the client examples that the tests run
/// (clients/rust/examples/quickstart.rs in client_local.rs,
/// clients/typescript/examples/quickstart.mjs under node --test), between
/// their `[quickstart]` marks, word for word.
#[test]
fn the_client_examples_in_the_docs_are_the_ones_that_run() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/clients.md")).unwrap();
    for example in [
        "clients/rust/examples/quickstart.rs",
        "clients/typescript/examples/quickstart.mjs",
    ] {
        let text = std::fs::read_to_string(root.join(example)).unwrap();
        let region = text
            .split("// [quickstart]\n")
            .nth(1)
            .and_then(|rest| rest.split("// [/quickstart]").next())
            .unwrap_or_else(|| panic!("{example} has no [quickstart] region"));
        assert!(!region.trim().is_empty(), "{example}: an empty region");
        assert!(
            doc.contains(region.trim_end()),
            "docs/clients.md does not quote {example} as it is"
        );
    }
}
