#[path = "../support/ringing_alarm.rs"]
mod ringing_alarm;

use ringing_alarm::Alarm;

async fn caller() {
    let _ = Alarm::reference("a-1").ring().await;
}

fn main() {
    let _ = caller();
}
