//! Beside the flow, presentation: sizes, times and aligned tables as the
//! operator page and the command line print them.

/// `85 B`, `1.9 KB`, `3.2 MB` (binary units).
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `2026-11-22 10:31:07Z` from unix milliseconds, in UTC so every operator
/// reads the same time.
pub fn utc_time(unix_ms: i64) -> String {
    let seconds = unix_ms.div_euclid(1000);
    let (days, second_of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (
        second_of_day / 3600,
        second_of_day % 3600 / 60,
        second_of_day % 60,
    );
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}Z")
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`), to avoid a date crate for one column.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Pads columns to equal width (the `right` columns right-aligned, for
/// numbers), two spaces apart, without trailing spaces.
pub fn align(table: &[Vec<String>], right: &[usize]) -> Vec<String> {
    let mut widths: Vec<usize> = Vec::new();
    for row in table {
        widths.resize(widths.len().max(row.len()), 0);
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    table
        .iter()
        .map(|row| {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(column, (cell, &width))| match right.contains(&column) {
                    true => format!("{cell:>width$}"),
                    false => format!("{cell:<width$}"),
                })
                .collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_binary_units_with_one_decimal() {
        assert_eq!(human_bytes(85), "85 B");
        assert_eq!(human_bytes(1946), "1.9 KB");
        assert_eq!(human_bytes(3 * 1024 * 1024 + 200 * 1024), "3.2 MB");
    }

    #[test]
    fn times_are_utc_calendar_dates() {
        assert_eq!(utc_time(0), "1970-01-01 00:00:00Z");
        assert_eq!(utc_time(951_782_400_000), "2000-02-29 00:00:00Z");
        assert_eq!(utc_time(1_795_343_467_000), "2026-11-22 10:31:07Z");
    }

    #[test]
    fn columns_are_padded_and_numbers_right_aligned() {
        let table = vec![
            vec!["POS".to_owned(), "ROLE".to_owned()],
            vec!["10".to_owned(), "user".to_owned()],
        ];
        assert_eq!(align(&table, &[0]), ["POS  ROLE", " 10  user"]);
    }
}
