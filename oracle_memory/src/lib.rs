//! Belief memory with provenance and the adjudication oracle. Not built yet: see issue 6. Pure; depends only on `oracle_core`.
