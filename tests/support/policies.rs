//! Policies the cases share.

use solid_objects::policy::{Denied, Policy, Request};

/// Allows every command and every read, and says nothing of destroying, watching or
/// administration, which are therefore denied.
pub struct CallersOnly;

impl Policy for CallersOnly {
    fn authorize_message(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }

    fn authorize_query(&self, _request: &Request<'_>) -> Result<(), Denied> {
        Ok(())
    }
}
