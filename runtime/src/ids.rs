//! The ids the runtime makes: request and effect ids, and the randomness of retry jitter.

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
