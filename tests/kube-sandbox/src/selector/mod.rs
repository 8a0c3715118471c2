//! Label and field selectors: the `labelSelector` and `fieldSelector` query
//! parameters of list and watch requests, and `metav1.LabelSelector` objects.
//!
//! Grammar, validation and matching follow `k8s.io/apimachinery`'s
//! `pkg/labels` and `pkg/fields`; error messages read like theirs.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Why a selector could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A label selector string whose requirements are not separated by
    /// commas, or that has something other than a requirement.
    #[error("{0}")]
    Syntax(String),
    /// A malformed requirement of a label selector string, or one whose key
    /// or values are not a valid label key or values.
    #[error("unable to parse requirement: {0}")]
    Requirement(String),
    /// A `metav1.LabelSelector` object that is not valid.
    #[error("invalid label selector: {0}")]
    Object(String),
    /// A field selector term without an operator or without a field.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    FieldTerm { selector: String, term: String },
    /// A field selector value with an unknown escape sequence, or an
    /// unescaped `,` or `=`.
    #[error("invalid field selector: {0}")]
    FieldValue(String),
}

/// A label selector: requirements on an object's labels, all of which must
/// hold for the object to be selected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Sorted by key, as Kubernetes keeps them.
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// An operator and its values; value sets are sorted and deduplicated.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

/// `metav1.LabelSelector`, as its JSON reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LabelSelectorObject {
    #[serde(default)]
    match_labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

#[derive(Deserialize)]
struct LabelSelectorRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Option<Vec<String>>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter: comma-separated
    /// requirements `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`,
    /// `k` (the label exists), `!k` (it does not), and `k>n`, `k<n` on
    /// integer values. Whitespace may surround any token; the empty string
    /// selects everything. Keys must be qualified names and values valid
    /// label values, as Kubernetes checks them.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        Parser::new(s).selector().map(Self::new)
    }

    /// Converts a `metav1.LabelSelector` object: `matchLabels`, and
    /// `matchExpressions` with the operators `In`, `NotIn`, `Exists` and
    /// `DoesNotExist`. An empty object selects everything.
    ///
    /// `Null` is an error, not a selector: Kubernetes gives a missing
    /// selector different meanings in different places (nothing for a
    /// PodDisruptionBudget, everything for a PVC's `spec.selector`), so the
    /// caller decides.
    pub fn from_object(v: &Value) -> Result<Self, SelectorError> {
        let invalid = |e: String| SelectorError::Object(e);
        let object = LabelSelectorObject::deserialize(v).map_err(|e| invalid(e.to_string()))?;
        let mut requirements = Vec::new();
        for (key, value) in object.match_labels.into_iter().flatten() {
            requirements.push(Requirement::new(&key, Op::Equals(value)).map_err(invalid)?);
        }
        for (index, r) in object.match_expressions.into_iter().flatten().enumerate() {
            let op = expression(index, &r.operator, r.values.unwrap_or_default());
            requirements.push(Requirement::new(&r.key, op.map_err(invalid)?).map_err(invalid)?);
        }
        Ok(Self::new(requirements))
    }

    /// Whether an object with these labels (its `metadata.labels`: a JSON
    /// object, or `Null` for none) is selected.
    pub fn matches(&self, labels: &Value) -> bool {
        let none = Map::new();
        let labels = labels.as_object().unwrap_or(&none);
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    fn new(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector { requirements }
    }
}

/// The selector in the `labelSelector` syntax, as Kubernetes prints it (in
/// a Scale's `status.selector`, for one).
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, requirement) in self.requirements.iter().enumerate() {
            let separator = if index == 0 { "" } else { "," };
            write!(f, "{separator}{requirement}")?;
        }
        Ok(())
    }
}

/// The operator of `matchExpressions[index]`, with its values.
fn expression(index: usize, operator: &str, values: Vec<String>) -> Result<Op, String> {
    let values_error = |rule| Err(format!("matchExpressions[{index}].values: {rule}"));
    match (operator, values.is_empty()) {
        ("In", false) => Ok(Op::In(values)),
        ("NotIn", false) => Ok(Op::NotIn(values)),
        ("Exists", true) => Ok(Op::Exists),
        ("DoesNotExist", true) => Ok(Op::DoesNotExist),
        ("In" | "NotIn", true) => {
            values_error("must be specified when `operator` is 'In' or 'NotIn'")
        }
        ("Exists" | "DoesNotExist", false) => {
            values_error("may not be specified when `operator` is 'Exists' or 'DoesNotExist'")
        }
        (other, _) => Err(format!("{other:?} is not a valid label selector operator")),
    }
}

impl Requirement {
    /// A requirement whose key and values Kubernetes accepts.
    fn new(key: &str, op: Op) -> Result<Self, String> {
        validate_key(key)?;
        let op = match op {
            Op::In(values) => Op::In(valid_values(key, values)?),
            Op::NotIn(values) => Op::NotIn(valid_values(key, values)?),
            Op::Equals(value) | Op::NotEquals(value) if !is_label_value(&value) => {
                return Err(invalid_value(0, key, &value));
            }
            op => op,
        };
        Ok(Requirement {
            key: key.to_owned(),
            op,
        })
    }

    fn matches(&self, labels: &Map<String, Value>) -> bool {
        let label = labels.get(&self.key);
        let text = label.and_then(Value::as_str);
        let number = || text.and_then(|text| text.parse::<i64>().ok());
        let among = |values: &[String]| text.is_some_and(|text| values.iter().any(|v| v == text));
        match &self.op {
            Op::Exists => label.is_some(),
            Op::DoesNotExist => label.is_none(),
            Op::Equals(value) => text == Some(value),
            Op::NotEquals(value) => text != Some(value),
            Op::In(values) => among(values),
            Op::NotIn(values) => !among(values),
            Op::GreaterThan(bound) => number().is_some_and(|n| n > *bound),
            Op::LessThan(bound) => number().is_some_and(|n| n < *bound),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        match &self.op {
            Op::Exists => write!(f, "{key}"),
            Op::DoesNotExist => write!(f, "!{key}"),
            Op::Equals(value) => write!(f, "{key}={value}"),
            Op::NotEquals(value) => write!(f, "{key}!={value}"),
            Op::In(values) => write!(f, "{key} in ({})", values.join(",")),
            Op::NotIn(values) => write!(f, "{key} notin ({})", values.join(",")),
            Op::GreaterThan(bound) => write!(f, "{key}>{bound}"),
            Op::LessThan(bound) => write!(f, "{key}<{bound}"),
        }
    }
}

fn valid_values(key: &str, mut values: Vec<String>) -> Result<Vec<String>, String> {
    if let Some((index, bad)) = values.iter().enumerate().find(|(_, v)| !is_label_value(v)) {
        return Err(invalid_value(index, key, bad));
    }
    values.sort();
    values.dedup();
    Ok(values)
}

fn invalid_value(index: usize, key: &str, value: &str) -> String {
    let reason = if value.len() > 63 {
        "must be no more than 63 characters"
    } else {
        "a valid label must be an empty string or consist of alphanumeric characters, \
         '-', '_' or '.', and must start and end with an alphanumeric character"
    };
    format!("values[{index}][{key}]: Invalid value: {value:?}: {reason}")
}

/// A label key is a qualified name: an optional DNS subdomain and `/`, then
/// a name of at most 63 characters.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = key
        .split_once('/')
        .map_or((None, key), |(p, n)| (Some(p), n));
    let reason = match prefix {
        Some("") => "prefix part must be non-empty",
        Some(prefix) if !is_dns_subdomain(prefix) => {
            "prefix part a lowercase RFC 1123 subdomain must consist of lower case \
             alphanumeric characters, '-' or '.', and must start and end with an \
             alphanumeric character"
        }
        _ if name.is_empty() => "name part must be non-empty",
        _ if name.len() > 63 => "name part must be no more than 63 characters",
        _ if !is_label_value(name) => {
            "name part must consist of alphanumeric characters, '-', '_' or '.', and \
             must start and end with an alphanumeric character"
        }
        _ => return Ok(()),
    };
    Err(format!("key: Invalid value: {key:?}: {reason}"))
}

/// Empty, or at most 63 alphanumerics, `-`, `_` and `.`, beginning and
/// ending with an alphanumeric.
fn is_label_value(value: &str) -> bool {
    let inner = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    let edge = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && value.chars().all(inner)
        && edge(value.chars().next())
        && edge(value.chars().next_back())
}

/// At most 253 characters of dot-separated RFC 1123 labels.
fn is_dns_subdomain(value: &str) -> bool {
    let inner = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    let is_label = |label: &str| {
        label.chars().all(inner)
            && label.starts_with(|c: char| c.is_ascii_alphanumeric())
            && label.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    value.len() <= 253 && value.split('.').all(is_label)
}

/// A token of the label selector grammar. `in` and `notin` are words,
/// which the parser takes as operators where it expects one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'s> {
    Word(&'s str),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Greater,
    Less,
    Open,
    Close,
    Comma,
    End,
}

impl fmt::Display for Token<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Token::Word(word) => word,
            Token::Bang => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::Greater => ">",
            Token::Less => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
            Token::End => "",
        })
    }
}

fn tokenize(s: &str) -> Vec<Token<'_>> {
    const SPECIAL: [char; 7] = ['=', '!', '(', ')', ',', '>', '<'];
    const SPACE: [char; 4] = [' ', '\t', '\r', '\n'];
    let mut tokens = Vec::new();
    let mut rest = s.trim_start_matches(SPACE);
    while let Some(c) = rest.chars().next() {
        let (token, len) = match (c, rest.get(..2)) {
            ('!', Some("!=")) => (Token::NotEquals, 2),
            ('=', Some("==")) => (Token::DoubleEquals, 2),
            ('!', _) => (Token::Bang, 1),
            ('=', _) => (Token::Equals, 1),
            ('>', _) => (Token::Greater, 1),
            ('<', _) => (Token::Less, 1),
            ('(', _) => (Token::Open, 1),
            (')', _) => (Token::Close, 1),
            (',', _) => (Token::Comma, 1),
            _ => {
                let end = |c: char| SPECIAL.contains(&c) || SPACE.contains(&c);
                let len = rest.find(end).unwrap_or(rest.len());
                (Token::Word(&rest[..len]), len)
            }
        };
        tokens.push(token);
        rest = rest[len..].trim_start_matches(SPACE);
    }
    tokens.push(Token::End);
    tokens
}

/// A recursive-descent parser over a label selector's tokens.
struct Parser<'s> {
    tokens: std::iter::Peekable<std::vec::IntoIter<Token<'s>>>,
}

impl<'s> Parser<'s> {
    fn new(s: &'s str) -> Self {
        Parser {
            tokens: tokenize(s).into_iter().peekable(),
        }
    }

    fn peek(&mut self) -> Token<'s> {
        self.tokens.peek().copied().unwrap_or(Token::End)
    }

    fn bump(&mut self) -> Token<'s> {
        self.tokens.next().unwrap_or(Token::End)
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let syntax = |found, expected| {
            SelectorError::Syntax(format!("found '{found}', expected: {expected}"))
        };
        let mut requirements = Vec::new();
        loop {
            match self.peek() {
                Token::End => return Ok(requirements),
                Token::Word(_) | Token::Bang => {}
                found => return Err(syntax(found, "!, identifier, or 'end of string'")),
            }
            requirements.push(self.requirement().map_err(SelectorError::Requirement)?);
            match self.bump() {
                Token::End => return Ok(requirements),
                Token::Comma if matches!(self.peek(), Token::Word(_) | Token::Bang) => {}
                Token::Comma => return Err(syntax(self.peek(), "identifier after ','")),
                found => return Err(syntax(found, "',' or 'end of string'")),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = self.peek() == Token::Bang;
        if negated {
            self.bump();
        }
        let key = match self.bump() {
            Token::Word(word) if word != "in" && word != "notin" => word,
            found => return Err(format!("found '{found}', expected: identifier")),
        };
        if negated || matches!(self.peek(), Token::End | Token::Comma) {
            let op = if negated {
                Op::DoesNotExist
            } else {
                Op::Exists
            };
            return Requirement::new(key, op);
        }
        let op = match self.bump() {
            Token::Word("in") => Op::In(self.value_set()?),
            Token::Word("notin") => Op::NotIn(self.value_set()?),
            Token::Equals | Token::DoubleEquals => Op::Equals(self.exact_value()?.to_owned()),
            Token::NotEquals => Op::NotEquals(self.exact_value()?.to_owned()),
            Token::Greater => Op::GreaterThan(self.integer()?),
            Token::Less => Op::LessThan(self.integer()?),
            found => {
                return Err(format!(
                    "found '{found}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        };
        Requirement::new(key, op)
    }

    /// `(a,b)`. An empty element, as in `()` or `(a,)`, is the empty value.
    fn value_set(&mut self) -> Result<Vec<String>, String> {
        match self.bump() {
            Token::Open => {}
            found => return Err(format!("found '{found}', expected: '('")),
        }
        let (mut values, mut current) = (Vec::new(), None);
        loop {
            match self.bump() {
                Token::Word(word) if current.is_none() => current = Some(word),
                Token::Comma => values.push(current.take().unwrap_or_default().to_owned()),
                Token::Close => {
                    values.push(current.unwrap_or_default().to_owned());
                    return Ok(values);
                }
                found => return Err(format!("found '{found}', expected: ',', ')' or identifier")),
            }
        }
    }

    /// The value after `=`, `==` or `!=`: a word, or nothing (the empty value).
    fn exact_value(&mut self) -> Result<&'s str, String> {
        match self.peek() {
            Token::End | Token::Comma => Ok(""),
            _ => match self.bump() {
                Token::Word(word) => Ok(word),
                found => Err(format!("found '{found}', expected: identifier")),
            },
        }
    }

    fn integer(&mut self) -> Result<i64, String> {
        let value = self.exact_value()?;
        let message = "for 'Gt', 'Lt' operators, the value must be an integer";
        value
            .parse()
            .map_err(|_| format!("{message}, not {value:?}"))
    }
}

/// A field selector: equalities on fields of an object, all of which must
/// hold for the object to be selected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// Sorted, as Kubernetes keeps them.
    terms: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct FieldTerm {
    path: String,
    value: String,
    equal: bool,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter: comma-separated
    /// `path=value`, `path==value` or `path!=value`. In values `\,`, `\=` and
    /// `\\` stand for `,`, `=` and `\` (apimachinery's `fields.EscapeValue`);
    /// other escapes, and an unescaped `,` or `=`, are errors. As in
    /// Kubernetes, whitespace is not trimmed.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut terms = Vec::new();
        for term in split_terms(s).into_iter().filter(|term| !term.is_empty()) {
            let not_understood = || SelectorError::FieldTerm {
                selector: s.to_owned(),
                term: term.to_owned(),
            };
            let (path, equal, value) = split_term(term).ok_or_else(not_understood)?;
            let (path, value) = (path.to_owned(), unescape(value)?);
            terms.push(FieldTerm { path, value, equal });
        }
        terms.sort();
        Ok(FieldSelector { terms })
    }

    /// Whether `obj` is selected. A term's path is a dotted path into the
    /// object (`metadata.name`, `spec.nodeName`, `involvedObject.uid`, ...).
    /// A missing field or `null` reads as "" (so `spec.nodeName=` selects
    /// unscheduled pods, as in Kubernetes), a string as itself, and other
    /// values as their JSON text (`true`, `3`).
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms
            .iter()
            .all(|t| (field_text(obj, &t.path) == t.value) == t.equal)
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The field paths the selector tests, for the caller to check against
    /// the fields a resource supports (Kubernetes rejects the others).
    pub fn paths(&self) -> impl Iterator<Item = &str> + '_ {
        self.terms.iter().map(|t| t.path.as_str())
    }
}

fn field_text<'v>(obj: &'v Value, path: &str) -> Cow<'v, str> {
    match path
        .split('.')
        .try_fold(obj, |value, segment| value.get(segment))
    {
        None | Some(Value::Null) => Cow::Borrowed(""),
        Some(Value::String(text)) => Cow::Borrowed(text),
        Some(other) => Cow::Owned(other.to_string()),
    }
}

/// Splits on the commas that a backslash does not escape.
fn split_terms(s: &str) -> Vec<&str> {
    let (mut terms, mut start, mut escaped) = (Vec::new(), 0, false);
    for (index, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&s[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    terms.push(&s[start..]);
    terms
}

/// Splits a term at its first operator into the (non-empty) path, whether
/// the operator is an equality, and the raw value.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let (path, equal, value) = term.char_indices().find_map(|(index, _)| {
        let (path, rest) = term.split_at(index);
        let equality = rest.strip_prefix("==").or_else(|| rest.strip_prefix('='));
        match rest.strip_prefix("!=") {
            Some(value) => Some((path, false, value)),
            None => equality.map(|value| (path, true, value)),
        }
    })?;
    (!path.is_empty()).then_some((path, equal, value))
}

fn unescape(raw: &str) -> Result<String, SelectorError> {
    let invalid = |message: String| Err(SelectorError::FieldValue(message));
    let (mut value, mut escaped) = (String::with_capacity(raw.len()), false);
    for c in raw.chars() {
        match c {
            '\\' | ',' | '=' if escaped => {
                value.push(c);
                escaped = false;
            }
            _ if escaped => return invalid(format!("invalid escape sequence: \\{c}")),
            '\\' => escaped = true,
            ',' | '=' => return invalid(format!("unescaped character in value: {c:?}")),
            _ => value.push(c),
        }
    }
    if escaped {
        return invalid("invalid escape sequence: \\".to_owned());
    }
    Ok(value)
}

#[cfg(test)]
mod tests;
