//! One definition of the table: the local stack's provisioning
//! (`genace_aws::provision`) must create exactly the table that
//! `infra/template.yaml` deploys. The table is provisioned on the local
//! endpoint, described back through the SDK, and compared with the
//! template's `OperationsTable` field by field: keys, attribute types,
//! every index with its keys and projection, the TTL attribute and the
//! stream. An index added to one and not the other fails here, not in a
//! deployment.
//!
//! The queues differ on purpose (local visibility timeouts and receive
//! counts are short, so tests finish); their deployed values are checked
//! by `tests/tests/template.rs`.

use std::collections::BTreeMap;

use genace_localaws::LocalAws;
use serde_json::{Value, json};

/// Strips CloudFormation tags down to their values.
fn untag(v: &serde_yaml::Value) -> &serde_yaml::Value {
    match v {
        serde_yaml::Value::Tagged(t) => untag(&t.value),
        other => other,
    }
}

fn text(v: &serde_yaml::Value) -> String {
    untag(v).as_str().unwrap_or_default().to_owned()
}

fn keys(schema: &serde_yaml::Value) -> Value {
    let list: Vec<Value> = untag(schema)
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|k| json!([text(&k["AttributeName"]), text(&k["KeyType"])]))
        .collect();
    json!(list)
}

/// The template's table, in one comparable shape.
fn from_template() -> Value {
    let t: serde_yaml::Value = serde_yaml::from_str(include_str!("../../infra/template.yaml")).unwrap();
    let p = &untag(&t["Resources"])["OperationsTable"]["Properties"];
    let attributes: BTreeMap<String, String> = untag(&p["AttributeDefinitions"])
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| (text(&a["AttributeName"]), text(&a["AttributeType"])))
        .collect();
    let indexes: BTreeMap<String, Value> = untag(&p["GlobalSecondaryIndexes"])
        .as_sequence()
        .unwrap()
        .iter()
        .map(|i| {
            let mut non_key: Vec<String> = untag(&i["Projection"]["NonKeyAttributes"])
                .as_sequence()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            non_key.sort();
            (
                text(&i["IndexName"]),
                json!({"keys": keys(&i["KeySchema"]), "projection": text(&i["Projection"]["ProjectionType"]), "non_key": non_key}),
            )
        })
        .collect();
    json!({
        "keys": keys(&p["KeySchema"]),
        "attributes": attributes,
        "indexes": indexes,
        "ttl": text(&p["TimeToLiveSpecification"]["AttributeName"]),
        "stream": text(&p["StreamSpecification"]["StreamViewType"]),
    })
}

#[tokio::test]
async fn the_local_table_is_the_templates_table() {
    let env = LocalAws::fresh().await;
    let client = genace_aws::clients::dynamodb(&env.sdk);
    let table = client
        .describe_table()
        .table_name(&env.names.table)
        .send()
        .await
        .unwrap()
        .table
        .unwrap();
    let key_list = |schema: &[aws_sdk_dynamodb::types::KeySchemaElement]| {
        json!(
            schema
                .iter()
                .map(|k| json!([k.attribute_name(), k.key_type().as_str()]))
                .collect::<Vec<_>>()
        )
    };
    let attributes: BTreeMap<String, String> = table
        .attribute_definitions()
        .iter()
        .map(|a| (a.attribute_name().to_owned(), a.attribute_type().as_str().to_owned()))
        .collect();
    let indexes: BTreeMap<String, Value> = table
        .global_secondary_indexes()
        .iter()
        .map(|i| {
            let projection = i.projection().unwrap();
            let mut non_key: Vec<String> = projection.non_key_attributes().to_vec();
            non_key.sort();
            (
                i.index_name().unwrap().to_owned(),
                json!({"keys": key_list(i.key_schema()), "projection": projection.projection_type().unwrap().as_str(), "non_key": non_key}),
            )
        })
        .collect();
    let ttl = client
        .describe_time_to_live()
        .table_name(&env.names.table)
        .send()
        .await
        .unwrap()
        .time_to_live_description
        .and_then(|d| d.attribute_name)
        .unwrap_or_default();
    let local = json!({
        "keys": key_list(table.key_schema()),
        "attributes": attributes,
        "indexes": indexes,
        "ttl": ttl,
        "stream": table
            .stream_specification()
            .and_then(|s| s.stream_view_type())
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default(),
    });
    let deployed = from_template();
    assert!(
        deployed["indexes"].as_object().is_some_and(|i| i.len() >= 3),
        "the template was read: {deployed}"
    );
    assert_eq!(
        local, deployed,
        "the local table differs from the template's:\nlocal:    {local}\ntemplate: {deployed}"
    );
}
