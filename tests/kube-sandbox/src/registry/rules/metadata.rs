//! Metadata validation: names, labels, annotations, and the apimachinery
//! message shapes the other rules share.

use serde_json::Value;

use crate::registry::Resource;

/// apimachinery's `field.Invalid(path, value, detail)`, as it prints.
pub(super) fn invalid_value(path: &str, value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {value:?}: {detail}")
}

/// apimachinery's `RegexError`: the rule, examples and the regex itself.
fn regex_error(message: &str, regex: &str, examples: &[&str]) -> String {
    let examples: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{message} (e.g. {}regex used for validation is '{regex}')",
        examples.join(" or ")
    )
}

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, the shape of one DNS label.
fn is_dns_label(s: &str) -> bool {
    let inner = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    s.chars().all(inner) && edge(s.chars().next()) && edge(s.chars().next_back())
}

/// The checks most of apimachinery's validators make: at most `max` long,
/// and of the shape a regex describes (`shaped`), with its `RegexError`.
pub(super) struct Rule {
    pub max: usize,
    pub message: &'static str,
    pub regex: &'static str,
    pub examples: &'static [&'static str],
}

impl Rule {
    pub(super) fn errors(&self, s: &str, shaped: bool) -> Vec<String> {
        let mut errors = Vec::new();
        if s.len() > self.max {
            errors.push(max_len_error(self.max));
        }
        if !shaped {
            errors.push(regex_error(self.message, self.regex, self.examples));
        }
        errors
    }
}

/// `IsDNS1123Label`: namespace names.
fn dns1123_label_errors(s: &str) -> Vec<String> {
    Rule {
        max: 63,
        message: "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
        regex: "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
        examples: &["my-name", "123-abc"],
    }
    .errors(s, is_dns_label(s))
}

/// `IsDNS1123Subdomain`: most object names, and label key prefixes.
pub(super) fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    Rule {
        max: 253,
        message: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        regex: r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
        examples: &["example.com"],
    }
    .errors(s, s.split('.').all(is_dns_label))
}

/// `IsDNS1035Label`: Service names (they become DNS names and env vars).
pub(super) fn dns1035_label_errors(s: &str) -> Vec<String> {
    Rule {
        max: 63,
        message: "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
        regex: "[a-z]([-a-z0-9]*[a-z0-9])?",
        examples: &["my-name", "abc-123"],
    }
    .errors(s, is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase()))
}

/// The name rule of a kind, as its registry validates `metadata.name`
/// (and, with `prefix`, a `generateName`, whose trailing dash is allowed).
fn name_errors(kind: &str, name: &str, prefix: bool) -> Vec<String> {
    let masked;
    let name = match name.strip_suffix('-') {
        Some(rest) if prefix && !rest.is_empty() => {
            masked = format!("{rest}a");
            masked.as_str()
        }
        _ => name,
    };
    match kind {
        "Service" => dns1035_label_errors(name),
        "Namespace" => dns1123_label_errors(name),
        _ => dns1123_subdomain_errors(name),
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, or empty.
fn is_label_value(s: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    s.chars().all(inner) && edge(s.chars().next()) && edge(s.chars().next_back())
}

const QUALIFIED_NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_REGEX: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_EXAMPLES: &[&str] = &["MyName", "my.name", "123-abc"];

/// `IsQualifiedName`: label and annotation keys, `[prefix/]name`.
fn qualified_name_errors(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                errors.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|e| format!("prefix part {e}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_RULE, QUALIFIED_NAME_REGEX, QUALIFIED_NAME_EXAMPLES)
            )]
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errors.push(format!("name part {}", max_len_error(63)));
    }
    if name.is_empty() || !is_label_value(name) {
        errors.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_RULE,
                QUALIFIED_NAME_REGEX,
                QUALIFIED_NAME_EXAMPLES
            )
        ));
    }
    errors
}

/// `IsValidLabelValue`: empty, or at most 63 of the qualified-name shape.
fn label_value_errors(value: &str) -> Vec<String> {
    Rule {
        max: 63,
        message: "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        regex: "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
        examples: &["MyValue", "my_value", "12345"],
    }
    .errors(value, is_label_value(value))
}

/// `ValidateLabels` at `path` (`metadata.labels`).
pub(super) fn label_causes(path: &str, labels: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    for (key, value) in labels.as_object().into_iter().flatten() {
        let value = value.as_str().unwrap_or_default();
        for e in qualified_name_errors(key) {
            causes.push(invalid_value(path, key, &e));
        }
        for e in label_value_errors(value) {
            causes.push(invalid_value(path, value, &e));
        }
    }
    causes
}

/// The most all annotations of an object may hold, keys and values.
const ANNOTATIONS_LIMIT: usize = 256 << 10;

/// `ValidateAnnotations` at `path`: keys are qualified names (in any
/// case), and all of them with their values fit in 256 KiB.
pub(super) fn annotation_causes(path: &str, annotations: &Value) -> Vec<String> {
    let mut causes = Vec::new();
    let mut total = 0;
    for (key, value) in annotations.as_object().into_iter().flatten() {
        for e in qualified_name_errors(&key.to_lowercase()) {
            causes.push(invalid_value(path, key, &e));
        }
        total += key.len() + value.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_LIMIT {
        causes.push(too_long(path, ANNOTATIONS_LIMIT));
    }
    causes
}

/// apimachinery's `field.TooLong` (1.33 wording).
pub(super) fn too_long(path: &str, max: usize) -> String {
    format!("{path}: Too long: may not be more than {max} bytes")
}

/// `ValidateObjectMeta` (on create: names too) and the label and
/// annotation half of `ValidateObjectMetaUpdate`.
pub(super) fn meta_causes(res: &Resource, meta: &Value, create: bool) -> Vec<String> {
    let mut causes = Vec::new();
    if create {
        let generate = meta["generateName"].as_str().unwrap_or_default();
        if !generate.is_empty() {
            for e in name_errors(res.builtin_kind(), generate, true) {
                causes.push(invalid_value("metadata.generateName", generate, &e));
            }
        }
        let name = meta["name"].as_str().unwrap_or_default();
        if name.is_empty() {
            causes.push("metadata.name: Required value: name or generateName is required".into());
        } else {
            for e in name_errors(res.builtin_kind(), name, false) {
                causes.push(invalid_value("metadata.name", name, &e));
            }
        }
    }
    causes.extend(label_causes("metadata.labels", &meta["labels"]));
    causes.extend(annotation_causes(
        "metadata.annotations",
        &meta["annotations"],
    ));
    causes
}
