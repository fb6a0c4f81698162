//! One shard item's update in a write of the account's parts, built up
//! clause by clause: what a split, an operator's limit and a lesson share.

use aws_sdk_dynamodb::types::builders::UpdateBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem};
use genace_stages::ports::table::StoreError;

use super::account_parts::{Parts, Split};

/// A shard item's `SET` and `REMOVE` clauses, its values and conditions.
pub(super) struct Clauses {
    update: UpdateBuilder,
    set: Vec<String>,
    remove: Vec<String>,
    conditions: Vec<String>,
}

impl Clauses {
    pub(super) fn new(update: UpdateBuilder) -> Self {
        Self {
            update,
            set: Vec::new(),
            remove: Vec::new(),
            conditions: Vec::new(),
        }
    }

    /// Shard `k`'s parts (an absent part removed), and, when the split
    /// bounds it, that the shard counts no more jobs than its part allows
    /// when the write lands.
    pub(super) fn parts(k: u16, update: UpdateBuilder, parts: &Parts) -> Self {
        let clauses = Self::new(update)
            .set_or_remove("max_in_flight", ":max", parts.max[usize::from(k)])
            .set_or_remove("learned_limit", ":learned", parts.learned[usize::from(k)]);
        match parts.bound(k) {
            Some(bound) => clauses
                .value(":bound", bound)
                .condition("(attribute_not_exists(in_flight) OR in_flight <= :bound)"),
            None => clauses,
        }
    }

    /// These clauses (shard 0's) only while shard 0 still holds what
    /// `read` found: the split, the whole limits and the span.
    pub(super) fn held_to(self, read: &Split) -> Self {
        let (condition, values) = read.unchanged();
        values
            .into_iter()
            .fold(self.condition(&condition), |c, (name, value)| c.attribute(&name, value))
    }

    /// `SET name = placeholder` with `value`, or `REMOVE name` without one.
    pub(super) fn set_or_remove(self, name: &str, placeholder: &str, value: Option<impl ToString>) -> Self {
        match value {
            Some(v) => self.set(&format!("{name} = {placeholder}")).value(placeholder, v),
            None => self.remove(&[name]),
        }
    }

    /// `SET name = placeholder` with `value`, only when there is one.
    pub(super) fn set_if(self, name: &str, placeholder: &str, value: Option<impl ToString>) -> Self {
        match value {
            Some(v) => self.set(&format!("{name} = {placeholder}")).value(placeholder, v),
            None => self,
        }
    }

    pub(super) fn set(mut self, clause: &str) -> Self {
        self.set.push(clause.to_owned());
        self
    }

    pub(super) fn remove(mut self, names: &[&str]) -> Self {
        self.remove.extend(names.iter().map(|n| (*n).to_owned()));
        self
    }

    /// A number for `placeholder`.
    pub(super) fn value(self, placeholder: &str, value: impl ToString) -> Self {
        self.attribute(placeholder, AttributeValue::N(value.to_string()))
    }

    pub(super) fn attribute(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.update = self.update.expression_attribute_values(placeholder, value);
        self
    }

    pub(super) fn condition(mut self, condition: &str) -> Self {
        self.conditions.push(condition.to_owned());
        self
    }

    /// The item of a transaction: every clause, every condition joined.
    pub(super) fn built(self) -> Result<TransactWriteItem, StoreError> {
        let expression = [("SET", self.set), ("REMOVE", self.remove)]
            .into_iter()
            .filter(|(_, names)| !names.is_empty())
            .map(|(action, names)| format!("{action} {}", names.join(", ")))
            .collect::<Vec<_>>()
            .join(" ");
        let mut update = self.update.update_expression(expression);
        if !self.conditions.is_empty() {
            update = update.condition_expression(self.conditions.join(" AND "));
        }
        let update = update.build().map_err(|e| StoreError::Service(e.to_string()))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }
}
