//! The layout's rules, read from the source as text: no circle of imports
//! between the files of any crate, the rooms of `shared/stages` importing
//! only downward, no non-test source file over 600 lines, and the tools
//! calling the API only through `genace-client`. A file imports another when it names an item by a `crate::`,
//! `super::` or `self::` path (in a `use` line or inline) that resolves to
//! the other file's module. Test code is left out: `tests.rs` files, and
//! everything from a file's first `#[cfg(test)]` on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most lines a non-test source file may have.
const MAX_FILE_LINES: usize = 600;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The workspace's crates, and the fuzz targets' crate: every folder with
/// a Cargo.toml and a `src/`.
fn crates() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root()];
    while let Some(dir) = stack.pop() {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "target" || name.starts_with('.') && dir != root() {
            continue;
        }
        if dir.join("Cargo.toml").is_file() && dir.join("src").is_dir() {
            found.push(dir.clone());
        }
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found.sort();
    found
}

/// Every `.rs` file under `dir`, but test files.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && path.file_name().is_some_and(|n| n != "tests.rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// A file's module path within its crate (`src/a/b.rs` and `src/a/b/mod.rs`
/// are `[a, b]`; `lib.rs` and `main.rs` are the root; `src/bin/x.rs` is a
/// root of its own, named `bin/x`).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    // A binary is a crate of its own: `src/bin/x.rs`, and `src/main.rs`
    // beside a `src/lib.rs`.
    if parts.first().is_some_and(|p| p == "bin") {
        return vec![format!("bin/{stem}")];
    }
    if parts.is_empty() && stem == "main" && src.join("lib.rs").is_file() {
        return vec!["bin/main".to_owned()];
    }
    if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
        parts.push(stem.to_owned());
    }
    parts
}

/// The non-test text of a file: up to its first `#[cfg(test)]`.
fn production(text: &str) -> &str {
    text.find("#[cfg(test)]").map_or(text, |at| &text[..at])
}

/// Without comments and string literals, roughly: enough that a path in a
/// doc comment or a message is not read as an import.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut in_str = false;
        let mut prev = ' ';
        for c in code.chars() {
            if c == '"' && prev != '\\' {
                in_str = !in_str;
            } else if !in_str {
                out.push(c);
            }
            prev = c;
        }
        out.push('\n');
    }
    out
}

/// The child modules a file declares with `mod name;` (files of their own).
fn child_modules(code: &str) -> Vec<String> {
    code.split(';')
        .filter_map(|stmt| {
            let words: Vec<&str> = stmt.split_whitespace().collect();
            match words.as_slice() {
                [.., "mod", name] => Some((*name).to_owned()),
                _ => None,
            }
        })
        .collect()
}

/// The module paths a file names, from its module `here`: each
/// `crate::`/`super::`/`self::` path, and each path that starts with a
/// child module the file declares (`use child::Item`, which Rust resolves
/// from the file itself), braces of a `use` expanded.
fn named_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let children: Vec<String> = child_modules(code).into_iter().map(|c| format!("{c}::")).collect();
    let mut i = 0;
    while i < bytes.len() {
        let fixed = ["crate::", "super::", "self::"].map(str::to_owned);
        let boundary = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == ':');
        let starts = fixed
            .iter()
            .chain(&children)
            .find(|p| boundary && code_at(&bytes, i, p));
        let Some(start) = starts else {
            i += 1;
            continue;
        };
        // Read the path up to its end, braces included.
        let mut j = i;
        let mut depth = 0;
        while j < bytes.len() {
            let c = bytes[j];
            if c == '{' {
                depth += 1;
            } else if c == '}' {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            } else if depth == 0 && !(is_ident(c) || c == ':') {
                break;
            }
            j += 1;
        }
        let text: String = bytes[i..j].iter().filter(|c| !c.is_whitespace()).collect();
        let base: Vec<String> = match start.as_str() {
            "crate::" => Vec::new(),
            "self::" => here.to_vec(),
            child if !fixed.iter().any(|f| f == child) => {
                let mut down = here.to_vec();
                down.push(child.trim_end_matches("::").to_owned());
                down
            }
            _ => {
                // `super` of a `mod.rs` (or lib) file is its folder's parent;
                // of `a/b.rs`, module `a`.
                let mut up = here.to_vec();
                up.pop();
                up
            }
        };
        let rest = &text[start.len()..];
        for tail in expand(rest) {
            let mut full = base.clone();
            let mut segs: Vec<&str> = tail.split("::").filter(|s| !s.is_empty()).collect();
            while segs.first() == Some(&"super") {
                full.pop();
                segs.remove(0);
            }
            full.extend(segs.iter().map(|s| (*s).to_owned()));
            paths.push(full);
        }
        i = j.max(i + 1);
    }
    paths
}

fn code_at(chars: &[char], at: usize, pat: &str) -> bool {
    pat.chars().enumerate().all(|(k, c)| chars.get(at + k) == Some(&c))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `a::{b, c::{d}}` as `a::b`, `a::c::d`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.to_owned()];
    };
    let head = &path[..open];
    let inner = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (k, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[from..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |t| format!("{head}{t}")))
        .collect()
}

/// One crate's file graph: file → the files it imports from.
fn graph(dir: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let src = dir.join("src");
    let files = sources(&src);
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            (
                module_of(&src, f),
                f.strip_prefix(root()).unwrap().display().to_string(),
            )
        })
        .collect();
    let mut edges = BTreeMap::new();
    for file in &files {
        let here = module_of(&src, file);
        let name = modules[&here].clone();
        let text = std::fs::read_to_string(file).unwrap();
        let code = code_only(production(&text));
        let targets: &mut BTreeSet<String> = edges.entry(name.clone()).or_default();
        if here.first().is_some_and(|h| h.starts_with("bin/")) {
            continue;
        }
        for path in named_paths(&code, &here) {
            // The longest prefix that is a file's module.
            let target = (0..=path.len()).rev().find_map(|n| modules.get(&path[..n])).cloned();
            if let Some(t) = target
                && t != name
            {
                targets.insert(t);
            }
        }
    }
    edges
}

/// The circles of a graph: its strongly connected parts of two or more.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then parts on its reverse.
    fn visit(n: &str, e: &BTreeMap<String, BTreeSet<String>>, seen: &mut BTreeSet<String>, out: &mut Vec<String>) {
        if !seen.insert(n.to_owned()) {
            return;
        }
        for m in e.get(n).into_iter().flatten() {
            visit(m, e, seen, out);
        }
        out.push(n.to_owned());
    }
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    for n in edges.keys() {
        visit(n, edges, &mut seen, &mut order);
    }
    let mut reverse: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in edges {
        for to in tos {
            reverse.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut assigned = BTreeSet::new();
    let mut parts = Vec::new();
    for n in order.iter().rev() {
        let mut part = Vec::new();
        visit(n, &reverse, &mut assigned, &mut part);
        if part.len() > 1 {
            part.sort();
            parts.push(part);
        }
    }
    parts
}

#[test]
fn no_crate_has_a_circle_of_imports_between_its_files() {
    let mut found = Vec::new();
    for dir in crates() {
        let edges = graph(&dir);
        for circle in circles(&edges) {
            let ties: Vec<String> = circle
                .iter()
                .flat_map(|f| {
                    edges[f]
                        .iter()
                        .filter(|t| circle.contains(t))
                        .map(move |t| format!("  {f} -> {t}"))
                })
                .collect();
            found.push(format!("{}:\n{}", circle.join(", "), ties.join("\n")));
        }
    }
    assert!(found.is_empty(), "circles of imports:\n{}", found.join("\n"));
}

/// The room of a file of `shared/stages`: its folder under `src/`, or the
/// file itself beside the folders.
fn stages_room(file: &str) -> &str {
    let rel = file.strip_prefix("shared/stages/src/").unwrap_or(file);
    rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs")
}

/// `shared/stages` in rooms by role, each importing only from below:
/// `ports` nothing above it; `config` the ports;
/// `pipeline` the ports, the settings and itself; `api` the ports, the
/// settings, itself and, of the pipeline, only the wake-up. `app`
/// (wiring) stands above them all.
#[test]
fn the_stages_rooms_import_only_downward() {
    let allowed = |from: &str, to: &str| -> bool {
        let room = stages_room(to);
        match stages_room(from) {
            "ports" => room == "ports",
            "config" => room == "ports",
            "pipeline" => matches!(room, "ports" | "config" | "pipeline"),
            "api" => matches!(room, "ports" | "config" | "api") || to == "shared/stages/src/pipeline/wake/mod.rs",
            "app" | "lib" => true,
            other => panic!("{from}: a file of no known room ({other}); give it one here"),
        }
    };
    let edges = graph(&root().join("shared/stages"));
    let upward: Vec<String> = edges
        .iter()
        .flat_map(|(from, tos)| {
            tos.iter()
                .filter(|to| !allowed(from, to))
                .map(move |to| format!("  {from} -> {to}"))
        })
        .collect();
    assert!(
        upward.is_empty(),
        "imports against the rooms' order:\n{}",
        upward.join("\n")
    );
    // The rule is read from real edges: the API does import the wake-up.
    assert!(edges["shared/stages/src/api/cancel.rs"].contains("shared/stages/src/pipeline/wake/mod.rs"));
    assert!(!allowed(
        "shared/stages/src/ports/table.rs",
        "shared/stages/src/api/listing.rs"
    ));
    assert!(!allowed(
        "shared/stages/src/api/erase.rs",
        "shared/stages/src/pipeline/deliver/mod.rs"
    ));
}

/// The string literals of a text that start like a table key prefix: two
/// or more capitals (or `_`) and then `#`, as in `"OP#{id}"`.
fn key_prefix_literals(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c != '"' || (i > 0 && chars[i - 1] == '\\') {
            continue;
        }
        let head: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_uppercase() || **c == '_')
            .collect();
        if head.len() >= 2 && chars.get(i + 1 + head.len()) == Some(&'#') {
            found.push(format!("{head}#"));
        }
    }
    found
}

/// Every key prefix of the table is spelt in `shared/core/src/keys.rs`
/// alone; the store's schema re-exports them. A prefix spelt twice can
/// drift, and then one side reads keys the other never writes.
#[test]
fn key_prefixes_are_spelt_only_in_the_keys_module() {
    let home = root().join("shared/core/src/keys.rs");
    let mut stray = Vec::new();
    for dir in crates() {
        for file in sources(&dir.join("src")) {
            if file == home {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let code: String = production(&text)
                .lines()
                .map(|l| if l.trim_start().starts_with("//") { "" } else { l })
                .collect::<Vec<_>>()
                .join("\n");
            for prefix in key_prefix_literals(&code) {
                stray.push(format!(
                    "{} spells {prefix}",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(
        stray.is_empty(),
        "key prefixes outside genace_core::keys:\n{}",
        stray.join("\n")
    );
    let home_text = std::fs::read_to_string(&home).unwrap();
    assert!(key_prefix_literals(&home_text).contains(&"OP#".to_owned()));
    assert_eq!(
        key_prefix_literals(r#"let k = format!("DUE#{s}"); let j = "x#y";"#),
        ["DUE#"]
    );
}

/// Request bodies are parsed in one place, core's `domain` (the intent)
/// and `requests` (every other body), so a request walks only downhill.
/// The edge reads a body only through `parsed_body`, which hands the JSON
/// to a core parser; no crate above core decodes JSON from a request or
/// checks a body's members itself.
#[test]
fn request_bodies_are_parsed_in_core_alone() {
    let reader = "shared/edge/src/http/request.rs";
    let mut stray = Vec::new();
    for dir in ["shared/edge", "shared/stages", "shared/app"] {
        for file in sources(&root().join(dir).join("src")) {
            let text = std::fs::read_to_string(&file).unwrap();
            let code = production(&text);
            let name = file.strip_prefix(root()).unwrap().display().to_string();
            let words = [
                "is not a known member",
                "must be a JSON object",
                "members(",
                "json_body(",
            ];
            for word in words.iter().filter(|w| code.contains(*w)) {
                if name != reader || !word.starts_with("json_body") {
                    stray.push(format!("{name} checks a body itself ({word})"));
                }
            }
            if name.contains("/http/handlers/") && code.contains("serde_json::from_") {
                stray.push(format!("{name} decodes JSON itself"));
            }
            for (at, _) in code.match_indices("parsed_body(") {
                let call = &code[at..code.len().min(at + 240)];
                let call = &call[..call.find(")?").unwrap_or(call.len())];
                if !call.contains("fn ") && !call.contains("::parse") {
                    stray.push(format!("{name}: a body read by no core parser: {call}"));
                }
            }
        }
    }
    assert!(
        stray.is_empty(),
        "bodies parsed outside genace-core:\n{}",
        stray.join("\n")
    );
}

/// The folders of the tools that call the service's API: the conformance
/// suite, the operator CLI, the benchmark and these end-to-end tests.
const API_CALLERS: [&str; 6] = [
    "conformance/src",
    "ops/src",
    "ops/tests",
    "bench/src",
    "tests/src",
    "tests/tests",
];

/// Files that may spell an API path and make HTTP requests themselves, and why.
const OWN_HTTP: [(&str, &str); 1] = [(
    "tests/tests/client_local.rs",
    "its lossy gateway forwards the client's requests to intake as they came, and loses an answer",
)];

/// What builds an HTTP request by hand.
const HAND_MADE_REQUESTS: [&str; 8] = [
    "reqwest::Client",
    "reqwest::get(",
    ".bearer_auth(",
    "http.get(",
    ".post(",
    ".put(",
    ".patch(",
    ".delete(",
];

/// The paths of the service's API that a text spells: `/v1/...` right after
/// a quote or a format string's `}`, as in `"/v1/operations"` or
/// `"{api}/v1/capacity"`. Genace's own `/v1/jobs`, which the stand-ins
/// answer, is not the service's. Comment lines are left out.
fn api_paths(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
        for (at, _) in line.match_indices("/v1/") {
            let before = line[..at].chars().next_back();
            let path: String = line[at..]
                .chars()
                .take_while(|c| !matches!(c, '"' | '?' | ' '))
                .collect();
            if matches!(before, Some('"' | '}')) && !path.starts_with("/v1/jobs") {
                found.push(path);
            }
        }
    }
    found
}

/// `text` without its comment lines.
fn uncommented(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first way `text` builds an HTTP request by hand, if it does.
fn hand_made_request(text: &str) -> Option<&'static str> {
    let code = uncommented(text);
    HAND_MADE_REQUESTS.iter().copied().find(|m| code.contains(m))
}

/// The tools call the API only through `genace-client`: no file of theirs
/// both spells one of the API's paths and builds an HTTP request itself,
/// nor sends a bearer token itself.
/// Requests to other servers (a Genace stand-in, a receiver, the console's
/// page) may stay hand-made, in files that name no API path.
#[test]
fn the_tools_call_the_api_only_through_the_client() {
    let mut stray = Vec::new();
    for dir in API_CALLERS {
        for file in sources(&root().join(dir)) {
            let name = file.strip_prefix(root()).unwrap().display().to_string();
            if name == "tests/tests/layout.rs" || OWN_HTTP.iter().any(|(f, _)| *f == name) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            if let (Some(path), Some(how)) = (api_paths(&text).first(), hand_made_request(&text)) {
                stray.push(format!("{name} spells {path} and builds a request itself ({how})"));
            } else if uncommented(&text).contains(".bearer_auth(") {
                // A bearer token is the API's: no other server these tools
                // call takes one, wherever the paths are spelt.
                stray.push(format!("{name} sends a bearer token itself"));
            }
        }
    }
    assert!(
        stray.is_empty(),
        "calls to the API beside genace-client:\n{}",
        stray.join("\n")
    );
    for (file, _) in OWN_HTTP {
        assert!(root().join(file).is_file(), "{file} is gone: drop it from OWN_HTTP");
    }
    // The reader itself.
    let hand = r#"let r = http.post(format!("{api}/v1/operations/{id}/cancel")).bearer_auth(&t);"#;
    assert_eq!(api_paths(hand), ["/v1/operations/{id}/cancel"]);
    assert_eq!(hand_made_request(hand), Some(".bearer_auth("));
    assert!(api_paths(r#"Mock::given(path("/v1/jobs")); // GET /v1/operations"#).is_empty());
    assert_eq!(api_paths(r#"Request::new(GET, "/v1/capacity?x=1")"#), ["/v1/capacity"]);
    assert_eq!(hand_made_request("client.operation(id).await"), None);
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let mut long = Vec::new();
    for dir in crates() {
        for file in sources(&dir.join("src")) {
            let text = std::fs::read_to_string(&file).unwrap();
            let lines = production(&text).lines().count();
            let name = file.strip_prefix(root()).unwrap().display().to_string();
            if lines > MAX_FILE_LINES {
                long.push(format!("{name} {lines}"));
            }
        }
    }
    assert!(long.is_empty(), "over {MAX_FILE_LINES} lines:\n{}", long.join("\n"));
}

/// The reader itself: a circle it should see, and paths it should expand.
#[test]
fn the_reader_sees_a_circle_and_expands_braces() {
    assert_eq!(expand("a::{b, c::{d, e}}"), ["a::b", "a::c::d", "a::c::e"]);
    let here = vec!["x".to_owned(), "y".to_owned()];
    let paths = named_paths("use super::z::Item; crate::w::f(); use self::inner::Q;", &here);
    assert_eq!(
        paths,
        [
            vec!["x".to_owned(), "z".to_owned(), "Item".to_owned()],
            vec!["w".to_owned(), "f".to_owned()],
            vec!["x".to_owned(), "y".to_owned(), "inner".to_owned(), "Q".to_owned()],
        ]
    );
    // A bare path into a declared child module is an import of the child.
    let parent = vec!["m".to_owned()];
    let code = "mod child;\npub mod other;\nuse child::{A, b::C};\nfn f() { other::g(); x::other::h(); }";
    assert_eq!(
        named_paths(code, &parent),
        [
            vec!["m".to_owned(), "child".to_owned(), "A".to_owned()],
            vec!["m".to_owned(), "child".to_owned(), "b".to_owned(), "C".to_owned()],
            vec!["m".to_owned(), "other".to_owned(), "g".to_owned()],
        ]
    );
    let mut e: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    e.entry("a".into()).or_default().insert("b".into());
    e.entry("b".into()).or_default().insert("c".into());
    e.entry("c".into()).or_default().insert("a".into());
    e.entry("d".into()).or_default().insert("a".into());
    assert_eq!(circles(&e), [vec!["a".to_owned(), "b".to_owned(), "c".to_owned()]]);
}
