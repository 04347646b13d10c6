//! `reject!(code, "format", args..)`: a `Rejection` whose code is checked at compile time.

use proc_macro2::TokenStream;
use quote::quote;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, Token};

/// The parsed input: a code, then the `format!` arguments.
pub(crate) struct RejectInput {
    code: Ident,
    message: TokenStream,
}

impl Parse for RejectInput {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let code: Ident = input.parse().map_err(|error| {
            syn::Error::new(
                error.span(),
                "the first argument of reject! is the rejection code, an identifier in \
                 snake_case: reject!(not_enough_seats, \"Only {} seats are left\", left)",
            )
        })?;
        if !input.peek(Token![,]) {
            return Err(input.error(
                "reject! takes a code and a message: reject!(not_enough_seats, \"Only {} seats \
                 are left\", left)",
            ));
        }
        input.parse::<Token![,]>()?;
        let message: TokenStream = input.parse()?;
        if message.is_empty() {
            return Err(input.error("reject! needs a message after the code"));
        }
        Ok(Self { code, message })
    }
}

impl RejectInput {
    /// Checks the code and builds the `Rejection`.
    pub(crate) fn expand(self) -> syn::Result<TokenStream> {
        let code = self.code.to_string();
        let snake = code
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_lowercase())
            && code
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !snake {
            return Err(syn::Error::new(
                self.code.span(),
                format!(
                    "the rejection code `{code}` must be snake_case (lowercase letters, digits \
                     and underscores, starting with a letter), such as `not_enough_seats`"
                ),
            ));
        }
        let message = self.message;
        Ok(quote! {
            ::solid_objects::__private::rejection(#code, ::std::format!(#message))
        })
    }
}
