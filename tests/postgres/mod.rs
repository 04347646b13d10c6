//! What only PostgreSQL has: every file here pins behaviour of the PostgreSQL store alone
//! (notices, leases of watched actors), and runs only in the postgres test binary.

mod watch;
