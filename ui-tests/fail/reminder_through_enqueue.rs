use solid_objects::prelude::*;

#[actor]
#[derive(Default)]
pub struct Alarm {
    rung: u32,
}

#[actor]
impl Alarm {
    #[reminder]
    pub fn ring(&mut self) {
        self.rung += 1;
    }
}

async fn caller() {
    let _ = Alarm::reference("a-1").enqueue().ring().await;
}

fn main() {
    let _ = caller();
}
