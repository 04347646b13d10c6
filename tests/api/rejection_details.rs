//! What `#[derive(Rejection)]` makes of a typed rejection: its fields become the details,
//! each under the field's name as serde spells it.

use solid_objects::prelude::*;

/// Why a reservation is refused; one field is a raw identifier.
#[derive(Debug, PartialEq, Rejection)]
enum TicketError {
    WrongKind { r#type: String },
}

/// A field written as a raw identifier (`r#type`) is a detail under its plain name, `type`.
/// That is how serde and the generated reply builders spell it, and what HTTP clients receive
/// in `details`.
#[test]
fn a_raw_identifier_field_is_a_detail_under_its_plain_name() {
    let rejection = TypedRejection::into_rejection(TicketError::WrongKind {
        r#type: "vip".to_owned(),
    });
    assert_eq!(
        rejection.details(),
        Some(&json!({ "type": "vip" })),
        "details as stored and sent to clients"
    );
}
