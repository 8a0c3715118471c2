//! Table columns in the width there is: each column as wide as its
//! widest cell (capped), one flexible column taking the rest, and the
//! least useful columns left out when not all fit.

/// One column's needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Need {
    /// Its widest cell, header included, capped by the caller.
    pub(super) width: usize,
    /// When to leave it out: 0 never; otherwise the highest goes first.
    pub(super) drop: u8,
    /// The column that takes the room left, at least `width` wide.
    pub(super) flex: bool,
}

impl Need {
    pub(super) fn fixed(width: usize, drop: u8) -> Need {
        Need {
            width,
            drop,
            flex: false,
        }
    }

    pub(super) fn flex(min: usize) -> Need {
        Need {
            width: min,
            drop: 0,
            flex: true,
        }
    }
}

/// Each column's width in `total` columns with `gap` between them, or
/// `None` for a column left out. Columns that cannot be dropped are kept
/// even when they overflow (the terminal clips them).
pub(super) fn fit(needs: &[Need], total: usize, gap: usize) -> Vec<Option<usize>> {
    let mut shown: Vec<bool> = vec![true; needs.len()];
    let used = |shown: &[bool]| {
        let (sum, count) = needs
            .iter()
            .zip(shown)
            .filter(|(_, shown)| **shown)
            .fold((0, 0_usize), |(sum, count), (need, _)| {
                (sum + need.width, count + 1)
            });
        sum + gap * count.saturating_sub(1)
    };
    while used(&shown) > total {
        let next = needs
            .iter()
            .enumerate()
            .filter(|(i, need)| shown[*i] && need.drop > 0)
            .max_by_key(|(_, need)| need.drop)
            .map(|(i, _)| i);
        match next {
            Some(i) => shown[i] = false,
            None => break,
        }
    }
    let spare = total.saturating_sub(used(&shown));
    let flex = needs
        .iter()
        .enumerate()
        .position(|(i, need)| shown[i] && need.flex);
    needs
        .iter()
        .enumerate()
        .map(|(i, need)| {
            let extra = if flex == Some(i) { spare } else { 0 };
            shown[i].then_some(need.width + extra)
        })
        .collect()
}

/// The widest of `cells` (and `header`), capped at `cap`.
pub(super) fn widest<'a>(
    header: &str,
    cells: impl IntoIterator<Item = &'a str>,
    cap: usize,
) -> usize {
    cells
        .into_iter()
        .map(super::text::width)
        .chain([super::text::width(header)])
        .max()
        .unwrap_or(0)
        .min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flexible_column_takes_the_rest() {
        let needs = [Need::fixed(4, 0), Need::flex(5), Need::fixed(3, 1)];
        assert_eq!(fit(&needs, 20, 1), [Some(4), Some(11), Some(3)]);
    }

    #[test]
    fn columns_go_in_their_drop_order_until_the_rest_fits() {
        let needs = [
            Need::fixed(4, 0),
            Need::fixed(6, 1),
            Need::flex(5),
            Need::fixed(6, 2),
        ];
        assert_eq!(fit(&needs, 17, 1), [Some(4), Some(6), Some(5), None]);
        assert_eq!(fit(&needs, 12, 1), [Some(4), None, Some(7), None]);
        // Nothing left to drop: the rest overflows, clipped by the terminal.
        assert_eq!(fit(&needs, 3, 1), [Some(4), None, Some(5), None]);
    }
}
