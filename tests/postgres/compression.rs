//! How PostgreSQL stores what the runtime writes: a state column compressed with lz4 where
//! the server is built with it.

use crate::several_runtimes::{runtime, TestDatabase};

#[tokio::test]
async fn states_are_compressed_with_lz4_where_the_server_has_it() {
    let Some(db) = TestDatabase::fresh().await else {
        return;
    };
    let runtime = runtime(&db.url, &db.clock).await;
    runtime.close().await;
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    // 'l' is lz4; the server this runs on (PostgreSQL 15 from Debian) is built with it.
    let compression: String = sqlx::query_scalar(
        "SELECT attcompression::text FROM pg_attribute
         WHERE attrelid = 'solid_instances'::regclass AND attname = 'state'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    assert_eq!(compression, "l");
}
