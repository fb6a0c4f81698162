//! Every phase and delivery state listed once.

use super::*;

/// `ALL` lists each variant once: a new variant fails to compile here
/// until it is placed.
#[test]
fn every_phase_and_delivery_state_is_listed_once() {
    let place = |p: Phase| match p {
        Phase::Prepared
        | Phase::Submitting
        | Phase::Uncertain
        | Phase::Accepted
        | Phase::Rendered
        | Phase::RenderFailed
        | Phase::SubmitFailed
        | Phase::Rejected
        | Phase::Abandoned
        | Phase::Cancelled => Phase::ALL.iter().filter(|q| **q == p).count(),
    };
    assert!(Phase::ALL.iter().all(|p| place(*p) == 1));
    let names: std::collections::BTreeSet<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
    assert_eq!(names.len(), Phase::ALL.len());
    let delivery = |d: DeliveryState| match d {
        DeliveryState::NotCollected
        | DeliveryState::Collecting
        | DeliveryState::Delivered
        | DeliveryState::DeliveryFailed => DeliveryState::ALL.iter().filter(|e| **e == d).count(),
    };
    assert!(DeliveryState::ALL.iter().all(|d| delivery(*d) == 1));
}
