//! Lends a book, reads the loan back, and takes the book back.

use solid_objects::{Error, SystemClock};
use standalone_app::{Book, Outbox, start};

#[tokio::main]
async fn main() -> Result<(), Error> {
    let path = std::env::temp_dir().join(format!("standalone-app-{}.db", std::process::id()));
    let runtime = start(&path, SystemClock, Outbox::default()).await?;
    let book = runtime.reference::<Book>("dune-1");
    let due_at = book.lend("ana").await?;
    println!(
        "dune-1 is lent to ana until {due_at}: {:?}",
        book.loan().await?
    );
    book.take_back("ana").await?;
    println!("dune-1 is back: {:?}", book.loan().await?);
    runtime.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}
