//! Kubernetes' version priority (`version.CompareKubeAwareVersionStrings`
//! of apimachinery): GA before beta before alpha, then higher major and
//! minor numbers first; versions that are not Kubernetes-like (`v1`,
//! `v2beta1`, `v1alpha3`) come last, alphabetically. Discovery lists a
//! custom group's versions in this order and prefers the first.

use std::cmp::Ordering;

/// `v2` → (2, GA, 0); `v1beta3` → (1, beta, 3); None when not Kubernetes-like.
fn parse(v: &str) -> Option<(u64, u8, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (major, tail) = rest.split_at(digits);
    let major = major.parse().ok()?;
    let (stage, minor) = match tail {
        "" => return Some((major, 2, 0)),
        t => match (t.strip_prefix("alpha"), t.strip_prefix("beta")) {
            (Some(m), _) => (0, m),
            (_, Some(m)) => (1, m),
            _ => return None,
        },
    };
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((major, stage, minor.parse().ok()?))
}

/// Greater when `a` has the higher priority.
pub fn compare(a: &str, b: &str) -> Ordering {
    match (parse(a), parse(b)) {
        _ if a == b => Ordering::Equal,
        (None, None) => b.cmp(a),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sa.cmp(&sb).then(ma.cmp(&mb)).then(na.cmp(&nb)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_aware_order() {
        let mut versions = vec![
            "v1alpha1",
            "foo1",
            "v1",
            "v11alpha2",
            "v2beta1",
            "v10",
            "v12alpha1",
            "foo10",
            "v10beta3",
            "v2",
            "v1beta1",
            "v3beta1",
        ];
        versions.sort_by(|a, b| compare(b, a));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v10beta3",
                "v3beta1",
                "v2beta1",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }
}
