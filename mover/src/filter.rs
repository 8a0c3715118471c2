//! `--exclude` patterns with rsync's matching rules.
//!
//! - a pattern without `/` matches the final name at any depth (`*.log`);
//! - a leading `/` anchors the pattern at the transfer root (`/build`);
//! - a trailing `/` matches directories only (`cache/`);
//! - any other `/` makes the pattern match the end of the path (`a/*.tmp`);
//! - `*` and `?` stop at `/`, `**` crosses it, `[...]` is a class.
//!
//! An excluded directory is skipped with everything under it, and excluded
//! destination entries are protected from `--delete`, as in rsync.

use globset::{GlobBuilder, GlobMatcher};

use crate::path::RelPath;

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("invalid --exclude pattern {pattern:?}: {source}")]
    Pattern {
        pattern: String,
        source: globset::Error,
    },
}

impl FilterError {
    /// A bad pattern is a usage error.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

#[derive(Debug, Clone)]
struct Rule {
    /// The pattern as anchored at the root, and (unanchored patterns) at any depth.
    matchers: Vec<GlobMatcher>,
    dir_only: bool,
}

/// A compiled list of exclude patterns.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    rules: Vec<Rule>,
}

impl Filter {
    pub fn new(patterns: &[String]) -> Result<Filter, FilterError> {
        let rules = patterns
            .iter()
            .map(|p| {
                compile(p).map_err(|source| FilterError::Pattern {
                    pattern: p.clone(),
                    source,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Filter { rules })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the entry at `path` is excluded.
    pub fn excludes(&self, path: &RelPath, is_dir: bool) -> bool {
        if path.is_root() {
            return false;
        }
        let text = path.as_bytes();
        self.rules
            .iter()
            .any(|r| (!r.dir_only || is_dir) && r.matchers.iter().any(|m| m.is_match(os_str(text))))
    }
}

/// Views path bytes as an `OsStr` (Unix paths are arbitrary bytes).
fn os_str(bytes: &[u8]) -> &std::ffi::OsStr {
    std::os::unix::ffi::OsStrExt::from_bytes(bytes)
}

fn compile(pattern: &str) -> Result<Rule, globset::Error> {
    let mut p = pattern;
    let dir_only = p.len() > 1 && p.ends_with('/');
    if dir_only {
        p = &p[..p.len() - 1];
    }
    // Braces and commas are literal in rsync patterns, not alternations.
    // As in rsync, a pattern without wildcards is taken literally, backslashes
    // included; with wildcards, a backslash escapes the next character.
    let mut p = if p.contains(['*', '?', '[']) {
        literal_braces(p)
    } else {
        escape_all(p)
    };
    // rsync's `**` matches any run of characters, `/` included, but the slashes
    // around it stay literal: `a/**/z` needs at least one directory between
    // `a` and `z`, where a glob's `**` component may match none. (A leading
    // `**/` matches at the top level too, in rsync as in globs.)
    p = p.replace("/**/", "/*/**/");
    let globs = match p.strip_prefix('/') {
        Some(anchored) => vec![anchored.to_string()],
        // Unanchored: matches the final name, or (with inner slashes) the path's tail.
        None => vec![format!("**/{p}"), p],
    };
    let matchers = globs
        .iter()
        .map(|g| {
            Ok(GlobBuilder::new(g)
                .literal_separator(true)
                .backslash_escape(true)
                .build()?
                .compile_matcher())
        })
        .collect::<Result<_, globset::Error>>()?;
    Ok(Rule { matchers, dir_only })
}

/// Escapes every character globs give a meaning to.
fn escape_all(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() * 2);
    for c in pattern.chars() {
        if "\\*?[]{},".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Escapes `{`, `}` and `,`, which are literal in rsync patterns but
/// alternation syntax in globs; what the user escaped stays as it is.
fn literal_braces(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 4);
    let mut chars = pattern.chars();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                out.extend(chars.next());
            }
            // Inside [...] every character is already literal.
            '[' if !in_class => {
                in_class = true;
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(c);
            }
            '{' | '}' | ',' if !in_class => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn rsync_rules() {
        let f = Filter::new(&[
            "*.log".into(),
            "/top".into(),
            "cache/".into(),
            "a/*.tmp".into(),
        ])
        .unwrap();
        assert!(f.excludes(&p("x.log"), false));
        assert!(f.excludes(&p("d/e/x.log"), false));
        assert!(!f.excludes(&p("x.logs"), false));
        assert!(f.excludes(&p("top"), true));
        assert!(!f.excludes(&p("d/top"), true));
        assert!(f.excludes(&p("d/cache"), true));
        assert!(!f.excludes(&p("d/cache"), false));
        assert!(f.excludes(&p("a/x.tmp"), false));
        assert!(f.excludes(&p("z/a/x.tmp"), false));
        assert!(!f.excludes(&p("a/b/x.tmp"), false));
        assert!(!f.excludes(&RelPath::root(), true));
    }

    #[test]
    fn double_star_crosses_directories() {
        let f = Filter::new(&["/a/**/z".into()]).unwrap();
        assert!(f.excludes(&p("a/b/c/z"), false));
        assert!(f.excludes(&p("a/b/z"), false));
        assert!(
            !f.excludes(&p("a/z"), false),
            "rsync needs something between the slashes"
        );
        assert!(!f.excludes(&p("b/a/c/z"), false));
        let f = Filter::new(&["**/z".into()]).unwrap();
        assert!(f.excludes(&p("a/z"), false));
        assert!(f.excludes(&p("z"), false));
    }

    #[test]
    fn braces_and_commas_are_literal() {
        let f = Filter::new(&[
            "foo,bar".into(),
            "x{y".into(),
            r"a\{b".into(),
            "[,_]z".into(),
            "q{*".into(),
        ])
        .unwrap();
        // Without wildcards the pattern is literal, backslash included (rsync).
        assert!(f.excludes(&p(r"a\{b"), false));
        assert!(!f.excludes(&p("a{b"), false));
        assert!(f.excludes(&p(",z"), false));
        assert!(!f.excludes(&p(r"\z"), false), "a class stays a class");
        assert!(f.excludes(&p("q{1"), false));
        assert!(f.excludes(&p("foo,bar"), false));
        assert!(!f.excludes(&p("foo"), false));
        assert!(!f.excludes(&p("bar"), false));
        assert!(f.excludes(&p("d/x{y"), false));
    }

    #[test]
    fn matches_non_utf8_names() {
        let f = Filter::new(&["caf*".into()]).unwrap();
        assert!(f.excludes(&RelPath::new(b"caf\xe9".to_vec()).unwrap(), false));
    }

    #[test]
    fn bad_pattern_is_reported() {
        assert!(Filter::new(&["[".into()]).is_err());
    }
}
