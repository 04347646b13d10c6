//! Headless Chromium driven through chromedriver (WebDriver), for the browser tests: the
//! binaries are Debian's `chromium` and `chromium-driver` packages, which `.ci/run` installs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

use super::free_port;
use super::servers::skipped;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver process and a browser session on it; killed when dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// `None` (the test skips) on a machine without Chromium, outside CI.
    pub async fn start() -> Option<Self> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            let missing = "Chromium or chromedriver not found (/usr/bin/chromium, \
                           /usr/bin/chromedriver); install Debian's chromium and \
                           chromium-driver to run this test";
            return skipped(missing);
        }
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let address = format!("127.0.0.1:{port}");
        let listening = super::eventually(Duration::from_secs(20), || async {
            tokio::net::TcpStream::connect(&address).await.is_ok()
        })
        .await;
        assert!(listening, "chromedriver did not listen on {address}");
        let profile = tempfile::tempdir().expect("a temp dir");
        // Chromium's background traffic (updates, sync, QUIC) is off: CI has no network.
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--window-size=1200,900",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }
        });
        let serde_json::Value::Object(capabilities) = capabilities else {
            unreachable!("an object");
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://{address}"))
            .await
            .expect("a browser session");
        Some(Self {
            client,
            driver,
            _profile: profile,
        })
    }

    /// Clicks the element of the current page that `locator` finds.
    pub async fn click(&self, locator: Locator<'_>) {
        let element = self.client.find(locator).await.unwrap();
        element.click().await.unwrap();
    }

    /// Waits until the current page shows an element that `locator` finds, and clicks it.
    pub async fn click_once_shown(&self, locator: Locator<'_>) {
        let element = self.client.wait().for_element(locator).await.unwrap();
        element.click().await.unwrap();
    }

    /// Saves a screenshot of the page as `target/screenshots/{name}.png`; returns its path.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("a screenshot");
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
            PathBuf::from,
        );
        let dir = target.join("screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshots dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("the screenshot is written");
        path
    }

    /// Ends the session and chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}
