use serde_json::json;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> Value {
    pairs
        .iter()
        .map(|&(k, v)| (k.to_owned(), json!(v)))
        .collect::<Map<_, _>>()
        .into()
}

/// A selector, labels, and whether the selector selects them.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

#[test]
fn label_requirements_match_as_in_kubernetes() {
    let cases: &[Case] = &[
        ("", &[], true),
        ("app=web", &[("app", "web")], true),
        ("app==web", &[("app", "web"), ("x", "y")], true),
        ("app=web", &[("app", "db")], false),
        ("app=web", &[], false),
        ("app!=web", &[("app", "db")], true),
        ("app!=web", &[], true),
        ("app!=web", &[("app", "web")], false),
        ("app=", &[("app", "")], true),
        ("app=", &[], false),
        ("tier in (web, db)", &[("tier", "db")], true),
        ("tier in (web,db)", &[("tier", "cache")], false),
        ("tier in (web,db)", &[], false),
        ("tier notin (web,db)", &[("tier", "cache")], true),
        ("tier notin (web,db)", &[], true),
        ("tier in ()", &[("tier", "")], true),
        ("tier", &[("tier", "")], true),
        ("tier", &[], false),
        ("!tier", &[], true),
        (" ! tier ", &[("tier", "x")], false),
        ("n>3,n<10", &[("n", "5")], true),
        ("n>3", &[("n", "three")], false),
        ("x in (in, notin)", &[("x", "notin")], true),
        (
            "a=1, b notin (2), !c, x.io/d",
            &[("a", "1"), ("x.io/d", "")],
            true,
        ),
        (
            "a=1, b notin (2), !c, x.io/d",
            &[("a", "1"), ("c", "")],
            false,
        ),
    ];
    for &(selector, pairs, want) in cases {
        let selects = LabelSelector::parse(selector)
            .unwrap()
            .matches(&labels(pairs));
        assert_eq!(selects, want, "{selector} on {pairs:?}");
    }
    let everything = LabelSelector::parse(" ").unwrap();
    assert!(everything.is_empty() && everything.matches(&Value::Null));
    assert!(!LabelSelector::parse("a").unwrap().matches(&Value::Null));
}

#[test]
fn label_selectors_print_in_canonical_form() {
    let selector = LabelSelector::parse("z in (b,a,b), app==web, !x, y, n>1").unwrap();
    assert_eq!(selector.to_string(), "app=web,n>1,!x,y,z in (a,b)");
    let reparsed = LabelSelector::parse(&selector.to_string()).unwrap();
    assert_eq!(reparsed, selector);
}

#[test]
fn malformed_label_selectors_are_rejected() {
    let syntax = [
        ("a=b,", "found '', expected: identifier after ','"),
        (
            ",a",
            "found ',', expected: !, identifier, or 'end of string'",
        ),
        ("a=b c=d", "found 'c', expected: ',' or 'end of string'"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
    ];
    for (selector, want) in syntax {
        let err = LabelSelector::parse(selector).unwrap_err();
        assert_eq!(err, SelectorError::Syntax(want.to_owned()), "{selector}");
    }
    let requirement = [
        ("a in b", "found 'b', expected: '('"),
        ("a in (b c)", "found 'c', expected: ',', ')' or identifier"),
        ("a in (b", "found '', expected: ',', ')' or identifier"),
        ("a b", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("in=x", "found 'in', expected: identifier"),
        ("a=(x)", "found '(', expected: identifier"),
    ];
    for (selector, want) in requirement {
        let want = SelectorError::Requirement(want.to_owned());
        assert_eq!(
            LabelSelector::parse(selector).unwrap_err(),
            want,
            "{selector}"
        );
    }
    let err = LabelSelector::parse("a b").unwrap_err().to_string();
    assert_eq!(
        err,
        "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    );
}

#[test]
fn label_keys_and_values_are_validated() {
    let long = "x".repeat(64);
    let (long_key, long_value) = (format!("{long}=x"), format!("app={long}"));
    let invalid = [
        "-app=x",
        "/app=x",
        "Example.com/app=x",
        "a/b/c=x",
        "app=a$b",
        "n>x",
    ];
    for selector in invalid
        .into_iter()
        .chain(["app in (ok,-bad)", &long_key, &long_value])
    {
        let err = LabelSelector::parse(selector).unwrap_err();
        assert!(
            matches!(err, SelectorError::Requirement(_)),
            "{selector}: {err}"
        );
    }
    let err = LabelSelector::parse("app=a$b").unwrap_err().to_string();
    let want =
        r#"unable to parse requirement: values[0][app]: Invalid value: "a$b": a valid label"#;
    assert!(err.starts_with(want), "{err}");
    let err = LabelSelector::parse("-app").unwrap_err().to_string();
    let want = r#"unable to parse requirement: key: Invalid value: "-app": name part must"#;
    assert!(err.starts_with(want), "{err}");
    assert!(LabelSelector::parse("example.com/a_b.c-d=A-1_b.2").is_ok());
}

#[test]
fn label_selector_objects() {
    let object = json!({
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    });
    let selector = LabelSelector::from_object(&object).unwrap();
    let same = LabelSelector::parse("app=web,tier in (a,b),!canary").unwrap();
    assert_eq!(selector, same);
    assert!(selector.matches(&labels(&[("app", "web"), ("tier", "b")])));
    assert!(!selector.matches(&labels(&[("app", "web"), ("tier", "b"), ("canary", "y")])));
    let only_labels = json!({"matchLabels": {"app": "web"}, "matchExpressions": null});
    let only_labels = LabelSelector::from_object(&only_labels).unwrap();
    assert_eq!(only_labels.to_string(), "app=web");
    assert!(LabelSelector::from_object(&json!({})).unwrap().is_empty());
}

#[test]
fn invalid_label_selector_objects_are_rejected() {
    let cases = [
        json!(null),
        json!("app=web"),
        json!({"matchLabels": {"app": 1}}),
        json!({"matchLabels": {"-app": "x"}}),
        json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
        json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
        json!({"matchExpressions": [{"operator": "Exists"}]}),
        json!({"matchExpressions": {"key": "a"}}),
    ];
    for case in cases {
        let err = LabelSelector::from_object(&case).unwrap_err();
        assert!(matches!(err, SelectorError::Object(_)), "{case}: {err}");
    }
    let gt = json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]});
    let err = LabelSelector::from_object(&gt).unwrap_err().to_string();
    let want = r#"invalid label selector: "Gt" is not a valid label selector operator"#;
    assert_eq!(err, want);
}

#[test]
fn field_selectors_match_dotted_paths() {
    let pod = json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "n1", "hostNetwork": true, "priority": 5},
        "status": {"phase": "Running"},
    });
    let cases = [
        ("", true),
        ("metadata.name=p,metadata.namespace==ns", true),
        ("status.phase!=Pending", true),
        ("status.phase=Pending", false),
        ("spec.hostNetwork=true,spec.priority=5", true),
        ("spec.nodeName=", false),
        ("spec.nodeName!=", true),
        ("spec.schedulerName=", true),
    ];
    for (selector, want) in cases {
        let selects = FieldSelector::parse(selector).unwrap().matches(&pod);
        assert_eq!(selects, want, "{selector}");
    }
    let unscheduled = FieldSelector::parse("spec.nodeName=").unwrap();
    assert!(unscheduled.matches(&json!({"spec": {"nodeName": null}})));
    assert!(FieldSelector::parse("").unwrap().is_empty());
}

#[test]
fn field_selector_values_unescape() {
    let event = json!({"involvedObject": {"name": "a,b=c\\d"}, "type": "Normal"});
    let selector = FieldSelector::parse(r"involvedObject.name=a\,b\=c\\d,type=Normal").unwrap();
    assert!(selector.matches(&event));
    let paths: Vec<_> = selector.paths().collect();
    assert_eq!(paths, ["involvedObject.name", "type"]);
}

#[test]
fn malformed_field_selectors_are_rejected() {
    let term = |selector: &str, term: &str| SelectorError::FieldTerm {
        selector: selector.to_owned(),
        term: term.to_owned(),
    };
    let value = |message: &str| SelectorError::FieldValue(message.to_owned());
    let cases = [
        ("metadata.name", term("metadata.name", "metadata.name")),
        ("a=b,=c", term("a=b,=c", "=c")),
        ("a=b=c", value("unescaped character in value: '='")),
        (r"a=b\x", value(r"invalid escape sequence: \x")),
        (r"a=b\", value(r"invalid escape sequence: \")),
    ];
    for (selector, want) in cases {
        assert_eq!(
            FieldSelector::parse(selector).unwrap_err(),
            want,
            "{selector}"
        );
    }
    let err = FieldSelector::parse("a").unwrap_err().to_string();
    assert_eq!(err, "invalid selector: 'a'; can't understand 'a'");
}
