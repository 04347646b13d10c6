//! Compile-time safety: every misuse of the DSL fails to compile at the user's code, with the
//! fix in the message; every supported form compiles.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("fail/*.rs");
    cases.pass("pass/*.rs");
}
