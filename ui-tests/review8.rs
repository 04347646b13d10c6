//! review8: forms the issue says must compile, that do not.

#[test]
fn ui_review8() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui-tests/review8/pass/*.rs");
}
