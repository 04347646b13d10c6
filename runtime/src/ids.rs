//! The ids the runtime makes: request and effect ids, the ids of actors that create requests
//! make, and the randomness of retry jitter.

/// A new request (or effect) id: a UUID that orders by creation time (version 7), so the
/// unique index on these ids grows at its end, where consecutive commits (and every turn of a
/// group commit) share one page, rather than at a random page per row. In a simulation with
/// a seed ([`crate::simulation::seed_ids`]) it comes from the seed.
pub(crate) fn new_request_id() -> String {
    #[cfg(feature = "simulation")]
    if let Some(seeded) = crate::simulation::next_seeded() {
        // The count in the top bits orders the ids by creation, as the clock does.
        let bits = (seeded & u128::from(u64::MAX)) << 80 | (seeded >> 64);
        return uuid::Builder::from_u128(bits)
            .with_version(uuid::Version::SortRand)
            .with_variant(uuid::Variant::RFC4122)
            .into_uuid()
            .to_string();
    }
    uuid::Uuid::now_v7().to_string()
}

/// A random byte (seeded in a simulation).
pub(crate) fn random_byte() -> u8 {
    #[cfg(feature = "simulation")]
    if let Some(seeded) = crate::simulation::next_seeded() {
        return seeded.to_le_bytes()[0] ^ (seeded >> 64).to_le_bytes()[0];
    }
    uuid::Uuid::new_v4().as_bytes()[0]
}

/// The namespace of [`id_for_key`]'s name-based UUIDs.
const KEYED_IDS: uuid::Uuid = uuid::Uuid::from_u128(0x5a1d_0b1e_c75f_4c1d_9a11_de6f_0e2a_7c3b);

/// The id of the actor of type `actor_type` that a create request under idempotency key `key`
/// makes, in `scope` (a tenant, a caller): a name-based UUID (version 5) of the three, so the
/// same key in the same scope names the same actor, and in another scope another one. Each
/// part is length-prefixed, so no two triples make the same name.
pub(crate) fn id_for_key(actor_type: &str, scope: &str, key: &str) -> String {
    let name = format!(
        "{}:{actor_type}{}:{scope}{}:{key}",
        actor_type.len(),
        scope.len(),
        key.len()
    );
    uuid::Uuid::new_v5(&KEYED_IDS, name.as_bytes()).to_string()
}

#[cfg(test)]
mod tests {
    use super::id_for_key;

    #[test]
    fn a_key_names_one_actor_per_scope_and_type() {
        let id = id_for_key("Order", "tenant-1", "k-1");
        assert_eq!(id, id_for_key("Order", "tenant-1", "k-1"));
        assert_eq!(id.len(), 36);
        assert_ne!(id, id_for_key("Order", "tenant-2", "k-1"));
        assert_ne!(id, id_for_key("Invoice", "tenant-1", "k-1"));
        // The parts are length-prefixed: moving a character across a boundary is another id.
        assert_ne!(
            id_for_key("Order", "ab", "c"),
            id_for_key("Order", "a", "bc")
        );
    }
}
