//! syn -> model: finds the actor's operations and records every malformed piece.

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, ImplItem, ImplItemFn, ItemImpl, ItemStruct, Pat,
    PathArguments, ReturnType, Type,
};

use crate::errors::Errors;
use crate::model::{
    ActorImpl, ActorState, Argument, Kind, Migration, Operation, Receiver, Returns, TurnParameter,
};

/// The options `#[actor(..)]` accepts on a struct.
const STRUCT_OPTIONS: &str =
    "`name = \"...\"`, `max_attempts = N`, `version = N`, `effects(EffectType, ..)`";

/// Reads `#[actor(name = "...")]` on the state struct, removing any serde derive of its own.
pub(crate) fn state(args: TokenStream, item: &mut ItemStruct, errors: &mut Errors) -> ActorState {
    remove_serde_derives(&mut item.attrs, errors);
    let mut stored_name = None;
    let mut max_attempts = None;
    let mut version = None;
    let mut effects = Vec::new();
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("effects") {
            meta.parse_nested_meta(|effect| {
                if effect.input.peek(syn::Token![=]) || effect.input.peek(syn::token::Paren) {
                    return Err(effect.error(
                        "name each effect's type, as in `effects(ChargeCard, SendReceipt)`",
                    ));
                }
                effects.push(effect.path);
                Ok(())
            })
        } else if meta.path.is_ident("version") {
            let value: syn::LitInt = meta.value()?.parse()?;
            let parsed: u32 = value.base10_parse()?;
            if parsed == 0 {
                return Err(syn::Error::new(
                    value.span(),
                    "versions start at 1 (the version of a state stored before it had one)",
                ));
            }
            version = Some(parsed);
            Ok(())
        } else if meta.path.is_ident("max_attempts") {
            let value: syn::LitInt = meta.value()?.parse()?;
            let attempts: u32 = value.base10_parse()?;
            if attempts == 0 {
                return Err(syn::Error::new(value.span(), "max_attempts is at least 1"));
            }
            max_attempts = Some(attempts);
            Ok(())
        } else if meta.path.is_ident("name") {
            let value: syn::LitStr = meta.value()?.parse()?;
            if value.value().is_empty() {
                return Err(syn::Error::new(
                    value.span(),
                    "the stored name cannot be empty",
                ));
            }
            stored_name = Some(value.value());
            Ok(())
        } else {
            Err(meta.error(format!(
                "unknown #[actor] option `{}`; the options are: {STRUCT_OPTIONS}",
                path_text(&meta.path)
            )))
        }
    });
    if let Err(error) = syn::parse::Parser::parse2(parser, args) {
        errors.push(error);
    }
    if !item.generics.params.is_empty() {
        errors.at(
            &item.generics,
            "an actor's state cannot be generic: it is stored under one type name; \
             make a separate struct for each type",
        );
    }
    ActorState {
        ident: item.ident.clone(),
        stored_name: stored_name.unwrap_or_else(|| item.ident.to_string()),
        max_attempts,
        version,
        effects,
    }
}

/// `#[actor]` derives serde for the state: a `Serialize` or `Deserialize` in the struct's own
/// `#[derive(..)]` is an error at that name, and is removed so that rustc adds no second,
/// conflicting impl to it.
fn remove_serde_derives(attrs: &mut [Attribute], errors: &mut Errors) {
    for attr in attrs.iter_mut() {
        if !attr.path().is_ident("derive") {
            continue;
        }
        let Ok(derived) = attr.parse_args_with(
            syn::punctuated::Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
        ) else {
            continue;
        };
        let (serde, kept): (Vec<syn::Path>, Vec<syn::Path>) =
            derived.into_iter().partition(|path| {
                path.segments.last().is_some_and(|segment| {
                    segment.ident == "Serialize" || segment.ident == "Deserialize"
                })
            });
        if serde.is_empty() {
            continue;
        }
        for path in &serde {
            errors.at(
                path,
                format!(
                    "`#[actor]` derives serde for the state; remove the derive of `{}`",
                    path_text(path)
                ),
            );
        }
        *attr = syn::parse_quote_spanned!(attr.pound_token.span=> #[derive(#(#kept),*)]);
    }
}

/// Reads the `#[actor]` impl block, removing the operation attributes from its methods.
pub(crate) fn actor_impl(args: TokenStream, item: &mut ItemImpl, errors: &mut Errors) -> ActorImpl {
    if !args.is_empty() {
        errors.at(
            &args,
            "#[actor] on an impl block takes no options; set the stored name on the struct: \
             #[actor(name = \"...\")]",
        );
    }
    if !item.generics.params.is_empty() {
        errors.at(&item.generics, "an actor's impl block cannot be generic");
    }
    let ident = match &*item.self_ty {
        Type::Path(path) if path.qself.is_none() => {
            path.path.segments.last().map(|s| s.ident.clone())
        }
        _ => None,
    };
    let ident = ident.unwrap_or_else(|| {
        errors.at(&item.self_ty, "#[actor] goes on `impl YourActor { .. }`");
        proc_macro2::Ident::new("InvalidActor", item.self_ty.span())
    });
    let mut operations = Vec::new();
    let mut migrations = Vec::new();
    let mut migrates = false;
    for member in &mut item.items {
        if let ImplItem::Fn(method) = member {
            migrates |= method
                .attrs
                .iter()
                .any(|attr| is_attribute(attr, "migrate"));
            let from = take_migration(&mut method.attrs, errors);
            let kind = take_kind(&mut method.attrs, errors);
            if let Some((from, from_span)) = from {
                if kind.is_some() {
                    errors.at(
                        &method.sig.ident,
                        "a function is either an operation or a migration: move the migration \
                         into a function of its own",
                    );
                    continue;
                }
                let before = errors.len();
                let parsed = migration(from, from_span, method, errors);
                if errors.len() == before {
                    migrations.push(parsed);
                }
            } else if let Some(kind) = kind {
                // A method whose shape is already wrong generates nothing, so its errors do
                // not cascade into the generated code.
                let before = errors.len();
                let parsed = operation(kind, method, errors);
                if errors.len() == before {
                    operations.push(parsed);
                }
                // A well-formed query whose body stages is still generated: only its body
                // is wrong, and callers of it should not see errors of their own.
                if let (Kind::Query, Some(turn)) = (kind, turn_binding(method)) {
                    crate::query_body::refuse_commands_only_calls(method, turn, errors);
                }
            }
        }
    }
    ActorImpl {
        ident,
        operations,
        migrations,
        migrates,
    }
}

/// Removes `#[migrate(from = n)]` from a function's attributes, returning `n` and where it is
/// written.
fn take_migration(attrs: &mut Vec<Attribute>, errors: &mut Errors) -> Option<(u32, Span)> {
    let mut found = None;
    attrs.retain(|attr| {
        if !is_attribute(attr, "migrate") {
            return true;
        }
        if found.is_some() {
            errors.at(
                attr,
                "a function migrates from one version; write #[migrate(from = n)] once",
            );
            return false;
        }
        let mut from = None;
        let parsed = match &attr.meta {
            syn::Meta::List(_) => attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("from") {
                    let value: syn::LitInt = meta.value()?.parse()?;
                    let version: u32 = value.base10_parse()?;
                    if version == 0 {
                        return Err(syn::Error::new(value.span(), "versions start at 1"));
                    }
                    from = Some((version, value.span()));
                    Ok(())
                } else {
                    Err(meta.error(format!(
                        "unknown #[migrate] option `{}`; the one option is `from = n`, the \
                         version of the stored state the function reads",
                        path_text(&meta.path)
                    )))
                }
            }),
            _ => Ok(()),
        };
        match (parsed, from) {
            (Err(error), _) => errors.push(error),
            (Ok(()), None) => errors.at(
                attr,
                "#[migrate] needs the version of the stored state it reads: \
                 #[migrate(from = 1)]",
            ),
            (Ok(()), Some(from)) => found = Some(from),
        }
        false
    });
    found
}

/// A migration's shape: no `self`, one argument (the old state), a return value, not async
/// or generic.
fn migration(from: u32, from_span: Span, method: &ImplItemFn, errors: &mut Errors) -> Migration {
    let sig = &method.sig;
    let example = format!(
        "`fn {}(old: StateV{from}) -> Result<StateV{}, MigrationError>`",
        sig.ident,
        from + 1
    );
    if let Some(receiver) = sig.receiver() {
        errors.at(
            receiver,
            format!("a migration reads the stored state, not `self`: take it as the one argument, {example}"),
        );
    } else if sig.inputs.len() != 1 {
        errors.at_span(
            sig.ident.span(),
            format!(
                "a migration takes one argument, the state stored at version {from}: {example}"
            ),
        );
    }
    if let Some(asyncness) = &sig.asyncness {
        errors.at(
            asyncness,
            "a migration runs while the state is read and cannot be async; compute the new \
             state from the old one alone",
        );
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.at(
            &sig.generics,
            "a migration cannot be generic: it reads one concrete type",
        );
    }
    let fallible = match &sig.output {
        ReturnType::Default => {
            errors.at_span(
                sig.ident.span(),
                format!(
                    "a migration returns the state of version {}: {example}",
                    from + 1
                ),
            );
            false
        }
        ReturnType::Type(_, ty) => result_ok_type(ty).is_some(),
    };
    Migration {
        from,
        from_span,
        name: sig.ident.clone(),
        fallible,
    }
}

/// Removes `#[command]`, `#[query]`, `#[reminder]` or `#[reply]` from a method's attributes.
fn take_kind(attrs: &mut Vec<Attribute>, errors: &mut Errors) -> Option<Kind> {
    let mut found: Option<Kind> = None;
    attrs.retain(|attr| {
        let Some(kind) = Kind::ALL
            .into_iter()
            .find(|kind| is_attribute(attr, kind.attribute()))
        else {
            return true;
        };
        if !matches!(attr.meta, syn::Meta::Path(_)) {
            errors.at(
                &attr.meta,
                format!(
                    "#[{}] takes no options; write it as `#[{}]`",
                    kind.attribute(),
                    kind.attribute()
                ),
            );
        }
        if let Some(first) = found {
            errors.at(
                attr,
                format!(
                    "a method is one kind of operation; it is already a #[{}]",
                    first.attribute()
                ),
            );
        } else {
            found = Some(kind);
        }
        false
    });
    found
}

fn is_attribute(attr: &Attribute, name: &str) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|segment| segment.ident == name)
}

fn operation(kind: Kind, method: &ImplItemFn, errors: &mut Errors) -> Operation {
    let sig = &method.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.at(
            &sig.generics,
            format!(
                "#[{}] `{}` cannot be generic: its arguments are stored as JSON and read back \
                 as one concrete type; use concrete types",
                kind.attribute(),
                sig.ident
            ),
        );
    }
    let receiver = match sig.receiver() {
        None => Receiver::Missing,
        Some(receiver) if receiver.reference.is_none() => Receiver::Owned,
        Some(receiver) if receiver.mutability.is_some() => Receiver::Mutable,
        Some(_) => Receiver::Shared,
    };
    let mut turn = None;
    let mut arguments = Vec::new();
    for input in &sig.inputs {
        let FnArg::Typed(typed) = input else { continue };
        if let Some(parameter) = turn_parameter(&typed.ty) {
            if turn.is_some() {
                errors.at(&typed.ty, "take the turn once");
            } else if !arguments.is_empty() {
                errors.at(
                    &typed.ty,
                    "take the turn right after `self`, before the other arguments",
                );
            }
            turn = Some(parameter);
            continue;
        }
        match &*typed.pat {
            Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                arguments.push(Argument {
                    name: pat.ident.clone(),
                    ty: (*typed.ty).clone(),
                });
            }
            other => errors.at(
                other,
                "name each argument with a plain identifier: it is the argument's key in the \
                 stored message",
            ),
        }
    }
    let returns = match &sig.output {
        ReturnType::Default => Returns::Value(syn::parse_quote!(())),
        ReturnType::Type(_, ty) => match result_ok_type(ty) {
            Some(ok) => Returns::Result(ok),
            None => Returns::Value((**ty).clone()),
        },
    };
    Operation {
        kind,
        name: sig.ident.clone(),
        vis: method.vis.clone(),
        docs: method
            .attrs
            .iter()
            .filter(|attr| attr.path().is_ident("doc"))
            .cloned()
            .collect(),
        cfgs: method
            .attrs
            .iter()
            .filter(|attr| attr.path().is_ident("cfg"))
            .cloned()
            .collect(),
        is_async: sig.asyncness.is_some(),
        receiver,
        turn,
        arguments,
        returns,
        returns_span: match &sig.output {
            ReturnType::Default => sig.ident.span(),
            ReturnType::Type(_, ty) => ty.span(),
        },
        span: sig.ident.span(),
    }
}

/// The name a method binds its `&Turn<..>` (or `&mut Turn<..>`) parameter to.
fn turn_binding(method: &ImplItemFn) -> Option<proc_macro2::Ident> {
    method.sig.inputs.iter().find_map(|input| {
        let FnArg::Typed(typed) = input else {
            return None;
        };
        turn_parameter(&typed.ty)?;
        match &*typed.pat {
            Pat::Ident(pat) => Some(pat.ident.clone()),
            _ => None,
        }
    })
}

/// `&Turn<..>` or `&mut Turn<..>`.
fn turn_parameter(ty: &Type) -> Option<TurnParameter> {
    let Type::Reference(reference) = ty else {
        return None;
    };
    let Type::Path(path) = &*reference.elem else {
        return None;
    };
    let last = path.path.segments.last()?;
    if last.ident != "Turn" {
        return None;
    }
    let actor = match &last.arguments {
        PathArguments::AngleBracketed(args) => args.args.iter().find_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty.clone()),
            _ => None,
        }),
        _ => None,
    };
    Some(TurnParameter {
        mutable: reference.mutability.is_some(),
        actor,
        span: ty.span(),
    })
}

/// The `T` of `Result<T, E>`: the error says what the runtime does (see `HandlerError`).
fn result_ok_type(ty: &Type) -> Option<Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    match types.as_slice() {
        [ok, _error] => Some((*ok).clone()),
        _ => None,
    }
}

fn path_text(path: &syn::Path) -> String {
    path.segments
        .iter()
        .map(|segment| segment.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

#[cfg(test)]
mod tests {
    use quote::quote;
    use syn::parse_quote;

    use crate::errors::Errors;

    #[test]
    fn a_serde_derive_on_the_state_is_an_error_and_is_removed() {
        let mut item: syn::ItemStruct = parse_quote! {
            #[derive(Default, Serialize, serde::Deserialize, Clone)]
            #[derive(Debug)]
            struct Counter { count: u32 }
        };
        let mut errors = Errors::default();
        super::state(quote!(), &mut item, &mut errors);
        assert_eq!(errors.len(), 2);
        let derives: Vec<String> = item
            .attrs
            .iter()
            .map(|attr| quote!(#attr).to_string())
            .collect();
        assert_eq!(
            derives,
            ["# [derive (Default , Clone)]", "# [derive (Debug)]"]
        );
    }
}
