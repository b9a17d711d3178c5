//! The reducer: how each event changes the state. Pure, and the only definition of state.

use crate::canon::CanonError;
use crate::event::Event;
use crate::payload::{EventKind, Payload, PayloadError, StateChangedRef};
use crate::state::State;
use serde_json::Value;

/// Why an event cannot be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    #[error(transparent)]
    Payload(#[from] PayloadError),
    #[error(transparent)]
    Canon(#[from] CanonError),
}

/// The state after `event`, given the state before it.
///
/// Only `state_changed` events write keys; every other kind leaves the state as it is (the
/// runtime records a `state_changed` for each effect it wants in the state, so the reducer stays
/// trivially auditable).
pub fn apply(state: &State, event: &Event) -> Result<State, ReduceError> {
    let mut next = state.clone();
    apply_in_place(&mut next, event)?;
    Ok(next)
}

/// [`apply`] on a state the caller owns.
pub fn apply_in_place(state: &mut State, event: &Event) -> Result<(), ReduceError> {
    apply_value(state, event.kind, &event.payload)
}

/// The reducer on a stored payload value of `kind`.
pub fn apply_value(state: &mut State, kind: EventKind, payload: &Value) -> Result<(), ReduceError> {
    if kind == EventKind::StateChanged {
        match StateChangedRef::read(payload) {
            Some(change) => state.apply_change(&change)?,
            // Not a valid payload by the borrowed reader: the typed decoder is the reference
            // and says why (and would apply it, were the two ever to disagree).
            None => apply_payload(state, &Payload::decode(kind, payload)?)?,
        }
    }
    Ok(())
}

/// The reducer proper, on a typed payload: the recorder computes `state_after` with it before
/// sealing, replay through [`apply_in_place`].
pub fn apply_payload(state: &mut State, payload: &Payload) -> Result<(), CanonError> {
    match payload {
        Payload::StateChanged(change) => state.apply_change(change),
        _ => Ok(()),
    }
}

/// The keys an event writes or deletes (empty for kinds that do not touch the state).
pub fn touched_keys(event: &Event) -> Vec<String> {
    if event.kind != EventKind::StateChanged {
        return Vec::new();
    }
    match StateChangedRef::read(&event.payload) {
        Some(c) => c
            .set
            .keys()
            .cloned()
            .chain(c.delete.iter().map(|k| k.to_string()))
            .collect(),
        None => Vec::new(),
    }
}
