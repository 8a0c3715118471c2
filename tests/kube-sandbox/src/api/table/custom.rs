//! The Table of a custom resource, as the apiextensions server's
//! `tableconvertor` prints it: `Name`, then the version's
//! `additionalPrinterColumns` (simple JSONPaths: `.a.b`, `[0]`,
//! `['key']`), or `Age` alone when it has none. A cell is the value as
//! its column's type takes it (`cellForJSONValue`), a `date` as an age,
//! and null where the path finds nothing.

use serde_json::{json, Value};
use time::OffsetDateTime;

use super::{column, human_duration, name, parse_time, row, table_metadata, IncludeObject};

/// The Table of `items` for a version with these printer columns (the
/// defaulted `Age` when there are none).
pub(super) fn table(
    columns: &[Value],
    items: &[Value],
    include: IncludeObject,
    list_metadata: &Value,
    now: OffsetDateTime,
) -> Value {
    let age = [json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"})];
    let columns = if columns.is_empty() {
        &age[..]
    } else {
        columns
    };
    let mut definitions: Vec<Value> = column("Name").into_iter().collect();
    definitions.extend(columns.iter().map(definition));
    let cells = |item: &Value| {
        let mut cells = vec![json!(name(item))];
        cells.extend(columns.iter().map(|c| cell(c, item, now)));
        cells
    };
    let rows: Vec<Value> = items
        .iter()
        .map(|item| row(item, cells(item), None, include))
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": table_metadata(list_metadata),
        "columnDefinitions": definitions,
        "rows": rows,
    })
}

/// A printer column's `TableColumnDefinition`.
fn definition(col: &Value) -> Value {
    let path = col["jsonPath"].as_str().unwrap_or_default();
    let description = match col["description"].as_str() {
        Some(d) if !d.is_empty() => d.to_string(),
        _ => format!("Custom resource definition column (in JSONPath format): {path}"),
    };
    json!({
        "name": col["name"].as_str().unwrap_or_default(),
        "type": col["type"].as_str().unwrap_or("string"),
        "format": col["format"].as_str().unwrap_or_default(),
        "description": description,
        "priority": col["priority"].as_i64().unwrap_or(0),
    })
}

/// The cell of `col` for `item`.
fn cell(col: &Value, item: &Value, now: OffsetDateTime) -> Value {
    let Some(value) = lookup(item, col["jsonPath"].as_str().unwrap_or_default()) else {
        return Value::Null;
    };
    match (col["type"].as_str().unwrap_or("string"), value) {
        ("string", Value::String(s)) => json!(s),
        ("string", Value::Null) => Value::Null,
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => match n.as_i64() {
            Some(i) => json!(i),
            None => json!(n.as_f64().unwrap_or_default() as i64),
        },
        ("number", Value::Number(n)) => json!(n.as_f64().unwrap_or_default()),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => match parse_time(s) {
            Some(t) => json!(human_duration(now - t)),
            None => json!("<invalid>"),
        },
        _ => Value::Null,
    }
}

/// What a simple JSONPath finds in `obj`.
fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut at = obj;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(tail) = rest.strip_prefix('.') {
            let end = tail.find(['.', '[']).unwrap_or(tail.len());
            at = at.get(&tail[..end])?;
            rest = &tail[end..];
        } else if let Some(tail) = rest.strip_prefix('[') {
            let end = tail.find(']')?;
            let key = &tail[..end];
            at = match key.parse::<usize>() {
                Ok(i) => at.get(i)?,
                Err(_) => at.get(key.trim_matches(|c| c == '\'' || c == '"'))?,
            };
            rest = &tail[end + 1..];
        } else {
            return None;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printer_columns_print_their_paths() {
        let columns = vec![
            json!({"name": "Pool", "type": "string", "jsonPath": ".spec.poolName"}),
            json!({"name": "Size", "type": "integer", "jsonPath": ".spec.sizes[0]", "description": "bytes"}),
            json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
            json!({"name": "State", "type": "string", "jsonPath": ".status['state']"}),
        ];
        let item = json!({
            "metadata": {"name": "pvc-1", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"poolName": "tank", "sizes": [1024]},
        });
        let now = time::macros::datetime!(2026-01-01 0:05 UTC);
        let table = table(&columns, &[item], IncludeObject::None, &json!({}), now);
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["Name", "Pool", "Size", "Age", "State"]);
        assert_eq!(
            table["columnDefinitions"][1]["description"],
            "Custom resource definition column (in JSONPath format): .spec.poolName"
        );
        assert_eq!(table["columnDefinitions"][2]["description"], "bytes");
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["pvc-1", "tank", 1024, "5m", null])
        );
    }
}
