//! examples/live_seats in headless Chromium: the page shows the seats left, live over
//! server-sent events; when another task holds seats, the count on the page drops within a
//! second; a seat held with the page's own button drops it too, and a confirm sells it.

use std::time::Duration;

use crate::show::Show;
use crate::support::browser::Browser;
use crate::support::eventually;
use crate::support::fixtures::on_a_file_in;
use crate::web::{Visitors, SEATS, SHOW};
use fantoccini::{Client, Locator};

/// The text of the element with this id, if the page has it.
async fn text(client: &Client, id: &str) -> Option<String> {
    let element = client.find(Locator::Id(id)).await.ok()?;
    element.text().await.ok()
}

/// Waits up to `within` for the page's seats-left count to read `left`.
async fn shows_left(client: &Client, left: u32, within: Duration) -> bool {
    let expected = left.to_string();
    eventually(within, || async {
        text(client, "left").await.as_deref() == Some(expected.as_str())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_seats_left_drop_within_a_second_of_a_hold_elsewhere() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let runtime = on_a_file_in::<Show>(&dir, Visitors).await;
    let show = runtime.reference::<Show>(SHOW);
    show.open(SEATS).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = crate::web::app(runtime.clone());
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = &browser.client;

    client.goto(&format!("http://{address}/")).await.unwrap();
    assert!(
        shows_left(client, SEATS, Duration::from_secs(20)).await,
        "the page never showed {SEATS} seats left: {:?}",
        text(client, "left").await
    );
    assert_eq!(text(client, "live").await.as_deref(), Some("(live)"));

    // Another task (another visitor's request, say) holds two seats.
    let other = runtime.reference::<Show>(SHOW);
    tokio::spawn(async move {
        other.hold(5).await.unwrap();
        other.hold(6).await.unwrap();
    })
    .await
    .unwrap();
    assert!(
        shows_left(client, SEATS - 2, Duration::from_secs(1)).await,
        "a second after two holds elsewhere the page says {:?} seats left",
        text(client, "left").await
    );

    // The page's own button: hold seat 0, then confirm it.
    browser
        .click(Locator::Css("#seats button[title='seat 0: free']"))
        .await;
    assert!(shows_left(client, SEATS - 3, Duration::from_secs(5)).await);
    browser.screenshot("live-seats").await;
    browser
        .click_once_shown(Locator::Css("#holds button"))
        .await;
    let sold = eventually(Duration::from_secs(5), || async {
        text(client, "status").await.as_deref() == Some("Seat 0 is yours.")
    })
    .await;
    assert!(sold, "{:?}", text(client, "status").await);
    let map = show.snapshot().await.unwrap().view();
    assert_eq!(map.seats_left, 37, "two held elsewhere, one sold here");

    browser.close().await;
    server.abort();
    runtime.close().await;
}
