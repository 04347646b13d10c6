//! `#[derive(Rejection)]` on an enum: each variant a rejection a caller can match on, its
//! snake_case name the stored code, its fields the details. Parse -> model -> check ->
//! generate, in one small module: the model is a list of variants.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, LitStr, Variant};

use crate::errors::Errors;

/// One variant: its code, its message and its fields.
struct RejectionVariant {
    ident: Ident,
    code: String,
    code_span: Span,
    message: Option<LitStr>,
    /// `#[rejection(status = 404)]`: the HTTP status of the axum response.
    status: Option<u16>,
    fields: Fields,
}

/// Expands the derive, collecting every error.
pub(crate) fn derive(input: &DeriveInput) -> TokenStream {
    let mut errors = Errors::default();
    let variants = match &input.data {
        Data::Enum(data) => data
            .variants
            .iter()
            .filter_map(|variant| parse_variant(variant, &mut errors))
            .collect::<Vec<_>>(),
        _ => {
            errors.at(
                &input.ident,
                "#[derive(Rejection)] goes on an enum whose variants are the rejections: \
                 `enum HoldError { NotEnoughSeats { left: u32 }, InvalidSeats }`",
            );
            Vec::new()
        }
    };
    if !input.generics.params.is_empty() {
        errors.at(
            &input.generics,
            "a rejection enum cannot be generic: its variants are stored by name",
        );
    }
    check_codes(&variants, &mut errors);
    if errors.len() > 0 {
        return errors.to_compile_errors();
    }
    generate(&input.ident, &variants)
}

/// Reads a variant and its `#[rejection(code = "..", message = "..")]`.
fn parse_variant(variant: &Variant, errors: &mut Errors) -> Option<RejectionVariant> {
    let mut code = (snake_case(&variant.ident.to_string()), variant.ident.span());
    let mut message = None;
    let mut status = None;
    for attr in variant
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("rejection"))
    {
        let parsed = attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("code") {
                let value: LitStr = meta.value()?.parse()?;
                code = (value.value(), value.span());
                Ok(())
            } else if meta.path.is_ident("message") {
                message = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("status") {
                let value: syn::LitInt = meta.value()?.parse()?;
                match value.base10_parse::<u16>() {
                    Ok(code) if (400..=499).contains(&code) => {
                        status = Some(code);
                        Ok(())
                    }
                    _ => Err(syn::Error::new(
                        value.span(),
                        "a rejection's status is a client error, 400 to 499 (such as 404 or \
                         422); without one, the response is 409 Conflict",
                    )),
                }
            } else {
                Err(meta.error(
                    "unknown option of #[rejection]: the options are `code = \"snake_case\"`, \
                     `message = \"text with {field}s\"` and `status = 404` (the HTTP status)",
                ))
            }
        });
        if let Err(error) = parsed {
            errors.push(error);
        }
    }
    Some(RejectionVariant {
        ident: variant.ident.clone(),
        code: code.0,
        code_span: code.1,
        message,
        status,
        fields: variant.fields.clone(),
    })
}

/// Every code is snake_case, as callers match on it, and no two variants share one.
fn check_codes(variants: &[RejectionVariant], errors: &mut Errors) {
    for (index, variant) in variants.iter().enumerate() {
        if !is_snake_case(&variant.code) {
            errors.at_span(
                variant.code_span,
                format!(
                    "the rejection code `{}` must be snake_case (lowercase letters, digits and \
                     underscores, starting with a letter), such as `not_enough_seats`",
                    variant.code
                ),
            );
        }
        if variants[..index]
            .iter()
            .any(|earlier| earlier.code == variant.code)
        {
            errors.at_span(
                variant.code_span,
                format!(
                    "two variants are stored as the code `{}`; give one another code with \
                     #[rejection(code = \"..\")]",
                    variant.code
                ),
            );
        }
    }
}

fn generate(ident: &Ident, variants: &[RejectionVariant]) -> TokenStream {
    let into_arms = variants.iter().map(into_arm);
    let from_arms = variants.iter().map(from_arm);
    let codes = variants.iter().map(|variant| &variant.code);
    quote! {
        impl ::solid_objects::TypedRejection for #ident {
            const CODES: &'static [&'static str] = &[#(#codes),*];

            fn into_rejection(self) -> ::solid_objects::Rejection {
                match self {
                    #(#into_arms)*
                }
            }

            fn from_rejection(
                rejection: &::solid_objects::Rejection,
            ) -> ::core::option::Option<Self> {
                let details = rejection.details();
                match rejection.code() {
                    #(#from_arms)*
                    _ => ::core::option::Option::None,
                }
            }
        }

        impl ::core::convert::From<#ident> for ::solid_objects::TurnError {
            fn from(rejection: #ident) -> Self {
                ::solid_objects::TurnError::Rejected(
                    ::solid_objects::TypedRejection::into_rejection(rejection),
                )
            }
        }
    }
}

/// `Self::Variant { a, b } => Rejection::checked(code, message).with_details(..)`.
fn into_arm(variant: &RejectionVariant) -> TokenStream {
    let ident = &variant.ident;
    let code = &variant.code;
    let default_message = code.replace('_', " ");
    let message = match &variant.message {
        Some(message) => quote!(::std::format!(#message)),
        None => quote!(::std::string::String::from(#default_message)),
    };
    let json = quote!(::solid_objects::__private::serde_json);
    let (pattern, details) = match &variant.fields {
        Fields::Unit => (quote!(Self::#ident), quote!(::core::option::Option::None)),
        Fields::Named(named) => {
            let names: Vec<&Ident> = named
                .named
                .iter()
                .filter_map(|f| f.ident.as_ref())
                .collect();
            let values = named.named.iter().map(|field| {
                let name = field.ident.as_ref();
                let ty = &field.ty;
                quote_spanned!(ty.span()=> ::solid_objects::__private::detail_to_value::<#ty>(&#name))
            });
            let keys = names.iter().map(|name| field_key(name));
            (
                quote!(Self::#ident { #(#names),* }),
                quote! {{
                    let mut details = #json::Map::new();
                    #(
                        if let ::core::result::Result::Ok(value) = #values {
                            details.insert(::std::string::String::from(#keys), value);
                        }
                    )*
                    ::core::option::Option::Some(#json::Value::Object(details))
                }},
            )
        }
        Fields::Unnamed(unnamed) => {
            let names: Vec<Ident> = (0..unnamed.unnamed.len())
                .map(|index| format_ident!("field_{index}"))
                .collect();
            let values = unnamed.unnamed.iter().zip(&names).map(|(field, name)| {
                let ty = &field.ty;
                quote_spanned!(ty.span()=>
                    ::solid_objects::__private::detail_to_value::<#ty>(&#name).unwrap_or_default()
                )
            });
            (
                quote!(Self::#ident(#(#names),*)),
                quote!(::core::option::Option::Some(#json::Value::Array(::std::vec![#(#values),*]))),
            )
        }
    };
    let status = variant.status.map(|status| {
        quote!(let rejection = ::solid_objects::__private::with_status(rejection, #status);)
    });
    quote! {
        #pattern => {
            let rejection = ::solid_objects::__private::rejection(#code, #message);
            #status
            match #details {
                ::core::option::Option::Some(details) => rejection.with_details(details),
                ::core::option::Option::None => rejection,
            }
        }
    }
}

/// `"code" => Some(Self::Variant { a: decoded, .. })`, `None` if the details do not fit.
/// The key a named field is stored under in the details: its name as serde writes it
/// (`r#type` is `type`).
fn field_key(name: &Ident) -> String {
    name.to_string().trim_start_matches("r#").to_owned()
}

fn from_arm(variant: &RejectionVariant) -> TokenStream {
    let ident = &variant.ident;
    let code = &variant.code;
    let build = match &variant.fields {
        Fields::Unit => quote!(::core::option::Option::Some(Self::#ident)),
        Fields::Named(named) => {
            let fields = named.named.iter().map(|field| {
                let name = field.ident.as_ref();
                let key = name.map(field_key).unwrap_or_default();
                let ty = &field.ty;
                quote_spanned!(ty.span()=>
                    #name: ::solid_objects::__private::detail_from_value::<#ty>(
                        details?.get(#key)?.clone(),
                    ).ok()?
                )
            });
            quote!(::core::option::Option::Some(Self::#ident { #(#fields),* }))
        }
        Fields::Unnamed(unnamed) => {
            let fields = unnamed.unnamed.iter().enumerate().map(|(index, field)| {
                let ty = &field.ty;
                quote_spanned!(ty.span()=>
                    ::solid_objects::__private::detail_from_value::<#ty>(
                        details?.get(#index)?.clone(),
                    ).ok()?
                )
            });
            quote!(::core::option::Option::Some(Self::#ident(#(#fields),*)))
        }
    };
    quote!(#code => #build,)
}

/// `NotEnoughSeats` -> `not_enough_seats`.
fn snake_case(name: &str) -> String {
    let mut snake = String::new();
    for (index, character) in name.trim_start_matches("r#").chars().enumerate() {
        if character.is_uppercase() {
            if index > 0 {
                snake.push('_');
            }
            snake.extend(character.to_lowercase());
        } else {
            snake.push(character);
        }
    }
    snake
}

fn is_snake_case(code: &str) -> bool {
    code.starts_with(|first: char| first.is_ascii_lowercase())
        && code
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_names_become_snake_case_codes() {
        assert_eq!(snake_case("NotEnoughSeats"), "not_enough_seats");
        assert_eq!(snake_case("Gone"), "gone");
        assert_eq!(snake_case("Seats2Left"), "seats2_left");
        assert!(!is_snake_case("NotEnough"));
        assert!(!is_snake_case("2seats"));
    }

    #[test]
    fn a_code_override_that_is_not_snake_case_is_an_error() {
        let input: DeriveInput = syn::parse_quote! {
            enum HoldError {
                #[rejection(code = "NotEnough")]
                NotEnoughSeats { left: u32 },
                #[rejection(code = "not_enough")]
                Other,
            }
        };
        let expanded = derive(&input).to_string();
        assert!(expanded.contains("must be snake_case"), "{expanded}");
    }
}
