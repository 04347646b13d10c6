//! What only SQLite has: every file here pins behaviour of the SQLite store alone (group
//! commit, the database file, its PRAGMAs, its writer), and runs only in the sqlite test binary.

mod group_commit;
mod wedges;
