//! Text in terminal cells: display widths, truncation with an ellipsis,
//! word wrapping. Widths count terminal columns (a CJK character is two),
//! as ratatui measures them.

use ratatui::text::Span;

/// `s`'s width in terminal columns.
pub(super) fn width(s: &str) -> usize {
    Span::raw(s).width()
}

/// `s` cut to `max` columns, ending in `…` when something was cut.
pub(super) fn truncate(s: &str, max: usize) -> String {
    if width(s) <= max {
        return s.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for ch in s.chars() {
        let w = width(ch.encode_utf8(&mut [0; 4]));
        if used + w > max - 1 {
            break;
        }
        out.push(ch);
        used += w;
    }
    out.push('…');
    out
}

/// `s` wrapped at spaces into lines of at most `max` columns; a word longer
/// than a line is split. Always at least one line.
pub(super) fn wrap(s: &str, max: usize) -> Vec<String> {
    let max = max.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut used = 0;
    for word in s.split_whitespace() {
        let w = width(word);
        if used > 0 && used + 1 + w <= max {
            line.push(' ');
            line.push_str(word);
            used += 1 + w;
            continue;
        }
        if used > 0 {
            lines.push(std::mem::take(&mut line));
            used = 0;
        }
        for ch in word.chars() {
            let cw = width(ch.encode_utf8(&mut [0; 4]));
            if used > 0 && used + cw > max {
                lines.push(std::mem::take(&mut line));
                used = 0;
            }
            line.push(ch);
            used += cw;
        }
    }
    if used > 0 || lines.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_marks_the_cut() {
        assert_eq!(truncate("data-x7k2p", 10), "data-x7k2p");
        assert_eq!(truncate("data-x7k2p", 6), "data-…");
        assert_eq!(truncate("data", 1), "…");
        assert_eq!(truncate("data", 0), "");
        assert_eq!(truncate("日本語", 4), "日…");
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_splits_long_words() {
        assert_eq!(
            wrap("the scheduler chooses; the new volume", 15),
            ["the scheduler", "chooses; the", "new volume"]
        );
        assert_eq!(wrap("abcdefgh ij", 3), ["abc", "def", "gh", "ij"]);
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(wrap("a b", 0), ["a", "b"]);
    }
}
