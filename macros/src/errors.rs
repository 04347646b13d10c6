//! Collects every error of one macro invocation, so the user sees them all at once.

use proc_macro2::TokenStream;
use quote::ToTokens;

/// The errors found so far.
#[derive(Default)]
pub(crate) struct Errors {
    errors: Vec<syn::Error>,
}

impl Errors {
    /// Records an error spanned on `tokens`.
    pub(crate) fn at(&mut self, tokens: impl ToTokens, message: impl std::fmt::Display) {
        self.errors.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub(crate) fn at_span(&mut self, span: proc_macro2::Span, message: impl std::fmt::Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    /// Records a parse error.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.errors.push(error);
    }

    /// How many errors are recorded.
    pub(crate) fn len(&self) -> usize {
        self.errors.len()
    }

    /// The recorded errors as `compile_error!` invocations.
    pub(crate) fn to_compile_errors(&self) -> TokenStream {
        self.errors
            .iter()
            .map(syn::Error::to_compile_error)
            .collect()
    }
}
