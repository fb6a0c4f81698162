//! The one `UpdateItem` that turns the item as read into the item decided,
//! guarded by the version it was decided on.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::item::Item;

/// An `UpdateItem` that turns `prev` into `next`: SET what changed or
/// appeared, REMOVE what disappeared. Attribute names go through
/// placeholders, so reserved words need no special care.
#[derive(Debug, Default, PartialEq)]
pub struct UpdatePlan {
    pub expression: String,
    pub names: HashMap<String, String>,
    pub values: Item,
}

/// The condition every record write carries: the version it was decided on.
pub(super) const VERSION_GUARD: &str = "#guard_version = :guard_version";

impl UpdatePlan {
    /// The plan with the names and values of [`VERSION_GUARD`] for `version`
    /// added: what both the plain update and the transaction's update send.
    pub(super) fn guarded_by(mut self, version: u64) -> Self {
        self.names.insert("#guard_version".to_owned(), "version".to_owned());
        self.values
            .insert(":guard_version".to_owned(), AttributeValue::N(version.to_string()));
        self
    }
}

pub fn plan_update(prev: &Item, next: &Item) -> Option<UpdatePlan> {
    let mut plan = UpdatePlan::default();
    let mut sets = Vec::new();
    let mut removes = Vec::new();
    let mut keys: Vec<&String> = next.keys().chain(prev.keys()).collect();
    keys.sort();
    keys.dedup();
    for (i, key) in keys.into_iter().enumerate() {
        if key == "pk" {
            continue;
        }
        let name = format!("#a{i}");
        match (prev.get(key), next.get(key)) {
            (old, Some(new)) if old != Some(new) => {
                let value = format!(":a{i}");
                sets.push(format!("{name} = {value}"));
                plan.values.insert(value, new.clone());
            }
            (Some(_), None) => removes.push(name.clone()),
            _ => continue,
        }
        plan.names.insert(name, key.clone());
    }
    if sets.is_empty() && removes.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !sets.is_empty() {
        parts.push(format!("SET {}", sets.join(", ")));
    }
    if !removes.is_empty() {
        parts.push(format!("REMOVE {}", removes.join(", ")));
    }
    plan.expression = parts.join(" ");
    Some(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    #[test]
    fn plan_sets_changes_and_removes_disappearances() {
        let prev: Item = [
            ("pk", s("OP#1")),
            ("phase", s("prepared")),
            ("due_at", s("1")),
            ("same", s("x")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let next: Item = [
            ("pk", s("OP#1")),
            ("phase", s("submitting")),
            ("claim", s("c")),
            ("same", s("x")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let plan = plan_update(&prev, &next).unwrap();
        let named: HashMap<&str, &str> = plan.names.iter().map(|(k, v)| (v.as_str(), k.as_str())).collect();
        assert!(!named.contains_key("pk") && !named.contains_key("same"));
        assert!(plan.expression.contains(&format!("{} = ", named["phase"])));
        assert!(plan.expression.contains(&format!("{} = ", named["claim"])));
        assert!(plan.expression.ends_with(&format!("REMOVE {}", named["due_at"])));
        assert_eq!(plan.values.len(), 2);
        assert_eq!(plan_update(&prev, &prev), None);
    }
}
