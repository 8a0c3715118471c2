//! Kubernetes' `$(VAR)` references in a container's `command`, `args` and
//! `env` values.

/// Kubernetes' `$(VAR)` expansion of `command`, `args` and `env` values.
///
/// `$(VAR)` becomes VAR's value when `env` defines it (the last definition
/// wins) and stays as written otherwise; `$$` becomes `$`, so `$$(VAR)` is
/// the literal `$(VAR)`; any other `$` is kept.
pub fn expand_vars(s: &str, env: &[(String, String)]) -> String {
    let lookup = |name: &str| {
        env.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        if let Some(after) = after.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some((name, after)) = after.strip_prefix('(').and_then(|r| r.split_once(')'))
        {
            match lookup(name) {
                Some(value) => out.push_str(value),
                None => out.extend(["$(", name, ")"]),
            }
            rest = after;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vars_expand_as_in_kubernetes() {
        let env = [("A", "x"), ("B", "y"), ("A", "z")].map(|(k, v)| (k.to_owned(), v.to_owned()));
        let cases = [
            ("$(A)-$(B)", "z-y"),
            ("$(UNDEFINED)", "$(UNDEFINED)"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$z"),
            ("a$b $", "a$b $"),
            ("$(A", "$(A"),
            ("$(A$$", "$(A$"),
            ("é$(B)é", "éyé"),
        ];
        for (input, expected) in cases {
            assert_eq!(expand_vars(input, &env), expected, "{input}");
        }
    }
}
