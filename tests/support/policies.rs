//! Policies the cases share.

use solid_objects::policy::{AdminRequest, Denied, Policy, Request};

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

/// An application's policy: its callers may call and read every actor (as under
/// [`CallersOnly`]), and administration is decided by the function it holds.
pub struct Administered(pub fn(&AdminRequest<'_>) -> Result<(), Denied>);

impl Policy for Administered {
    fn authorize_message(&self, request: &Request<'_>) -> Result<(), Denied> {
        CallersOnly.authorize_message(request)
    }

    fn authorize_query(&self, request: &Request<'_>) -> Result<(), Denied> {
        CallersOnly.authorize_query(request)
    }

    fn authorize_administration(&self, request: &AdminRequest<'_>) -> Result<(), Denied> {
        (self.0)(request)
    }
}
