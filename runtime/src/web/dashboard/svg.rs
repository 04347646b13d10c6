//! Line charts as server-rendered SVG, from a typed model of labelled points and named
//! series.
//!
//! A chart is markup in the page: no script, nothing loaded, and its colours and sizes are
//! SVG presentation attributes rather than styles, so the pages' Content-Security-Policy
//! allows nothing new. Every text goes through maud, which escapes it. Each point is a
//! circle whose `<title>` (what a screen reader says and a pointer shows) carries the numbers
//! behind it, `12:05 completed 9`, and whose `data-series`, `data-at` and `data-value` carry
//! them for scripts and tests. The chart has its title as its accessible name, a labelled
//! axis each way, and a legend.

use maud::{html, Markup};

/// The chart's size in SVG units (it scales down to the page's width).
const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 250.0;

/// The plotting area within it: room on the left for the values, below for the times and
/// the legend.
const LEFT: f64 = 64.0;
const RIGHT: f64 = WIDTH - 12.0;
const TOP: f64 = 24.0;
const BOTTOM: f64 = HEIGHT - 70.0;

/// The colour of the axes' texts and lines.
const INK: &str = "#5a6072";
const GRID: &str = "#e4e6ee";

/// What a chart's values are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    /// A number of things.
    Count,
    /// A length of time in milliseconds.
    Milliseconds,
}

impl Unit {
    /// A value as a point's title states it: exact.
    fn exact(self, value: i64) -> String {
        match self {
            Self::Count => value.to_string(),
            Self::Milliseconds => format!("{value} ms"),
        }
    }

    /// A value as an axis labels it: short.
    fn short(self, value: i64) -> String {
        match self {
            Self::Count => value.to_string(),
            Self::Milliseconds if value == 0 => "0".to_owned(),
            Self::Milliseconds if value < 1000 => format!("{value} ms"),
            Self::Milliseconds if value < 120_000 => seconds(value, 1000, "s"),
            Self::Milliseconds if value < 7_200_000 => seconds(value, 60_000, "min"),
            Self::Milliseconds => seconds(value, 3_600_000, "h"),
        }
    }
}

/// `value` in units of `per`, with one decimal unless it is whole.
fn seconds(value: i64, per: i64, unit: &str) -> String {
    if value % per == 0 {
        format!("{} {unit}", value / per)
    } else {
        format!("{:.1} {unit}", value as f64 / per as f64)
    }
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub(super) struct Series {
    /// Its name, in the legend and in each point's title.
    pub(super) name: &'static str,
    /// Its colour (an SVG colour).
    pub(super) colour: &'static str,
    /// A value per label of the chart; `None`: nothing was measured there (no point, and the
    /// line breaks).
    pub(super) values: Vec<Option<i64>>,
}

/// A chart: points at labelled times, a line per series.
#[derive(Debug, Clone)]
pub(super) struct Chart<'a> {
    /// Names it for scripts and tests (`data-chart`), and its title's element (`id`).
    pub(super) id: &'static str,
    /// What it shows: its title and accessible name.
    pub(super) title: &'a str,
    /// What the vertical axis measures ("messages per minute").
    pub(super) measure: &'a str,
    /// What the horizontal axis shows ("minute, UTC").
    pub(super) time_axis: &'a str,
    /// The label of each point, in order ("12:05").
    pub(super) labels: &'a [String],
    /// The points whose label the horizontal axis shows (every tenth minute, say).
    pub(super) marks: &'a [usize],
    pub(super) unit: Unit,
    pub(super) series: Vec<Series>,
}

impl Chart<'_> {
    /// The horizontal position of the `index`th point: the middle of its slot.
    fn x(&self, index: usize) -> f64 {
        let slot = (RIGHT - LEFT) / self.labels.len().max(1) as f64;
        LEFT + slot * (index as f64 + 0.5)
    }

    /// The largest value of any series.
    fn largest(&self) -> i64 {
        self.series
            .iter()
            .flat_map(|series| series.values.iter().flatten())
            .copied()
            .max()
            .unwrap_or(0)
    }
}

/// The top of the vertical axis for values up to `largest`: 1, 2 or 5 times a power of ten.
fn axis_top(largest: i64) -> i64 {
    let mut power = 1_i64;
    loop {
        for step in [1_i64, 2, 5] {
            let top = step.saturating_mul(power);
            if top >= largest || top == i64::MAX {
                return top;
            }
        }
        power = power.saturating_mul(10);
    }
}

/// A coordinate as SVG reads it.
fn at(coordinate: f64) -> String {
    format!("{coordinate:.1}")
}

/// The chart as an SVG element; see the module docs.
pub(super) fn render(chart: &Chart<'_>) -> Markup {
    let top = axis_top(chart.largest()).max(1);
    let y = |value: i64| BOTTOM - (BOTTOM - TOP) * (value as f64 / top as f64);
    let mut ticks = vec![0, top];
    if top % 2 == 0 {
        ticks.insert(1, top / 2);
    }
    let title_id = format!("chart-{}", chart.id);
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" role="img" data-chart=(chart.id)
            aria-labelledby=(title_id) viewBox={ "0 0 " (WIDTH) " " (HEIGHT) }
            width=(WIDTH) height=(HEIGHT) font-family="system-ui, sans-serif" font-size="11" {
            title id=(title_id) { (chart.title) }
            text x=(at(LEFT)) y="14" fill=(INK) { (chart.measure) }
            @for tick in &ticks {
                line x1=(at(LEFT)) x2=(at(RIGHT)) y1=(at(y(*tick))) y2=(at(y(*tick)))
                    stroke=(if *tick == 0 { INK } else { GRID }) stroke-width="1" {}
                text x=(at(LEFT - 6.0)) y=(at(y(*tick) + 4.0)) text-anchor="end" fill=(INK) {
                    (chart.unit.short(*tick))
                }
            }
            @for index in chart.marks.iter().copied().filter(|index| *index < chart.labels.len()) {
                line x1=(at(chart.x(index))) x2=(at(chart.x(index))) y1=(at(BOTTOM))
                    y2=(at(BOTTOM + 4.0)) stroke=(INK) stroke-width="1" {}
                text x=(at(chart.x(index))) y=(at(BOTTOM + 16.0)) text-anchor="middle"
                    fill=(INK) { (chart.labels[index]) }
            }
            text x=(at((LEFT + RIGHT) / 2.0)) y=(at(BOTTOM + 32.0)) text-anchor="middle"
                fill=(INK) { (chart.time_axis) }
            @for series in &chart.series {
                path d=(line(chart, series, &y)) fill="none" stroke=(series.colour)
                    stroke-width="2" stroke-linejoin="round" {}
                @for (index, value) in series.values.iter().enumerate() {
                    @if let Some(value) = value {
                        circle cx=(at(chart.x(index))) cy=(at(y(*value))) r="3"
                            fill=(series.colour) data-series=(series.name)
                            data-at=(chart.labels[index]) data-value=(value) {
                            title {
                                (chart.labels[index]) " " (series.name) " "
                                (chart.unit.exact(*value))
                            }
                        }
                    }
                }
            }
            (legend(chart))
        }
    }
}

/// The path through a series' points, broken where it has none.
fn line(chart: &Chart<'_>, series: &Series, y: &dyn Fn(i64) -> f64) -> String {
    let mut path = String::new();
    let mut drawing = false;
    for (index, value) in series.values.iter().enumerate() {
        match value {
            Some(value) => {
                path.push_str(if drawing { " L " } else { " M " });
                path.push_str(&format!("{} {}", at(chart.x(index)), at(y(*value))));
                drawing = true;
            }
            None => drawing = false,
        }
    }
    path.trim_start().to_owned()
}

/// A swatch and the name of each series, in a row under the chart.
fn legend(chart: &Chart<'_>) -> Markup {
    let y = HEIGHT - 14.0;
    let placed = chart.series.iter().scan(LEFT, |x, series| {
        let here = *x;
        // A swatch, its gap, the name at about 7 units a character, and room before the next.
        *x += 14.0 + 7.0 * series.name.len() as f64 + 18.0;
        Some((here, series))
    });
    html! {
        g.legend {
            @for (x, series) in placed {
                rect x=(at(x)) y=(at(y - 9.0)) width="10" height="10" fill=(series.colour) {}
                text x=(at(x + 14.0)) y=(at(y)) fill=(INK) { (series.name) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels() -> Vec<String> {
        ["12:00", "12:01", "12:02"].map(str::to_owned).to_vec()
    }

    #[test]
    fn each_point_carries_its_numbers_in_its_title_and_the_text_is_escaped() {
        let labels = labels();
        let chart = Chart {
            id: "finished",
            title: "Finished <b>messages</b>",
            measure: "messages per minute",
            time_axis: "minute, UTC",
            labels: &labels,
            marks: &[0, 2],
            unit: Unit::Count,
            series: vec![Series {
                name: "completed",
                colour: "#1e7b34",
                values: vec![Some(9), None, Some(0)],
            }],
        };
        let svg = render(&chart).into_string();
        assert!(svg.contains("<title>12:00 completed 9</title>"), "{svg}");
        assert!(svg.contains("<title>12:02 completed 0</title>"), "{svg}");
        assert!(
            !svg.contains("12:01 completed"),
            "no point where nothing was measured"
        );
        assert!(
            svg.contains("Finished &lt;b&gt;messages&lt;/b&gt;"),
            "{svg}"
        );
        assert!(
            !svg.contains("style="),
            "presentation attributes only: {svg}"
        );
        let path = line(&chart, &chart.series[0], &|value| value as f64);
        assert_eq!(
            path, "M 158.0 9.0 M 534.0 0.0",
            "the line breaks where no point is"
        );
    }

    #[test]
    fn the_vertical_axis_ends_at_a_round_number_above_the_largest_value() {
        assert_eq!(axis_top(0), 1);
        assert_eq!(axis_top(1), 1);
        assert_eq!(axis_top(3), 5);
        assert_eq!(axis_top(9), 10);
        assert_eq!(axis_top(11), 20);
        assert_eq!(axis_top(70_000), 100_000);
        assert_eq!(Unit::Milliseconds.short(70_000), "70 s");
        assert_eq!(Unit::Milliseconds.short(1_500), "1.5 s");
        assert_eq!(Unit::Milliseconds.exact(70_000), "70000 ms");
    }
}
