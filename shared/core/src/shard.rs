//! The Genace account's counters, split over shards.
//!
//! Every slot-moving write (a claim, a wait, an end) moves the account's
//! counters in the same transaction as the record. On one item, that item's
//! write budget caps how many jobs the whole account admits a second. With
//! `S` shards, each shard item counts the jobs admitted on it and the
//! operations waiting on it, and holds its part of every limit
//! ([`AccountShards::part`]): the parts add up to the limit, so the account
//! never admits more than one item would, and one operation's claim, wait
//! or end touches one shard (two when a woken claim takes a slot on another
//! shard than the one it waited on).
//!
//! An operation's shard is on its record ([`OperationRecord::account_shard`]),
//! chosen when it first claims or waits ([`AccountShards::home`]), moved by
//! a claim that takes a slot elsewhere (or a wait on a shard no longer in
//! use), and kept by every other write, so its end frees the shard that
//! admitted it whatever `S` is by then.

use sha2::{Digest, Sha256};

use crate::capacity::AccountCapacity;
use crate::ledger::{self, Overflow, Shares};
use crate::record::OperationRecord;

/// The most shards an account may be split into.
pub const MAX_ACCOUNT_SHARDS: u16 = 32;

/// How many shards the account's counters are split into: 1 to
/// [`MAX_ACCOUNT_SHARDS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccountShards(u16);

impl Default for AccountShards {
    fn default() -> Self {
        Self::ONE
    }
}

impl AccountShards {
    /// One item, as before shards.
    pub const ONE: Self = Self(1);

    /// `n` shards, when `n` is from 1 to [`MAX_ACCOUNT_SHARDS`].
    pub fn new(n: u16) -> Option<Self> {
        (1..=MAX_ACCOUNT_SHARDS).contains(&n).then_some(Self(n))
    }

    pub fn get(self) -> u16 {
        self.0
    }

    /// Every shard, in order.
    pub fn all(self) -> std::ops::Range<u16> {
        0..self.0
    }

    /// Where the operation claims or waits when nothing else decides: the
    /// shard that counts it already, while that shard is in use, else one
    /// drawn from its id, so a burst spreads evenly.
    pub fn home(self, rec: &OperationRecord) -> u16 {
        rec.account_shard.filter(|s| *s < self.0).unwrap_or_else(|| {
            let digest = Sha256::digest(rec.operation_id.as_str().as_bytes());
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            (u64::from_be_bytes(first) % u64::from(self.0)) as u16
        })
    }

    /// A shard's part of a limit of the whole account: an even split, the
    /// remainder to the first shards. The parts add up to `limit`.
    pub fn part(self, limit: u32, shard: u16) -> u32 {
        if shard >= self.0 {
            // A shard out of use (`S` was lowered) admits nothing.
            return 0;
        }
        let n = u32::from(self.0);
        limit / n + u32::from(u32::from(shard) < limit % n)
    }

    /// The parts of `limit` for this `S`, split over the jobs each shard
    /// counts now (`in_flight[k]` is shard `k`'s, for every shard that may
    /// count one, those a lower `S` left among them). Every shard in use
    /// keeps room for its own jobs, and the headroom left raises the lowest
    /// parts first (an even split when no shard holds more than its even
    /// part); the jobs of shards out of use are charged to the limit until
    /// they end. So the parts add up to the limit less those jobs, and no
    /// claim under them takes the account past `limit`, whatever `S` was.
    /// When the jobs already pass the limit (it was lowered), every part
    /// is 0: the account's jobs never rise while they are over the limit.
    pub fn split(self, limit: u32, in_flight: &[i64]) -> Vec<u32> {
        let n = usize::from(self.0);
        if crate::planted::on(crate::planted::SPLIT_EVEN) {
            return self.all().map(|k| self.part(limit, k)).collect();
        }
        let count = |k: usize| u64::try_from(in_flight.get(k).copied().unwrap_or(0)).unwrap_or(0);
        let retired: u64 = (n..in_flight.len()).map(count).sum();
        let room_for_use = u64::from(limit).saturating_sub(retired);
        let used: Vec<u64> = (0..n).map(count).collect();
        let total: u64 = used.iter().sum();
        let parts: Vec<u64> = if total <= room_for_use {
            // The headroom fills the lowest parts first, so parts stay as
            // even as the jobs allow (an even split where every shard is
            // within its even part): claims come to each shard alike.
            let mut parts = used.clone();
            let mut headroom = room_for_use - total;
            while headroom > 0 {
                let low = *parts.iter().min().unwrap_or(&0);
                let next = parts.iter().filter(|p| **p > low).min().copied().unwrap_or(u64::MAX);
                let lowest: Vec<usize> = (0..n).filter(|k| parts[*k] == low).collect();
                // Raise every lowest part to the next level, or share
                // what is left among them, the first shards first.
                let each = (next - low).min(headroom / lowest.len() as u64);
                if each == 0 {
                    for k in lowest.into_iter().take(headroom as usize) {
                        parts[k] += 1;
                    }
                    break;
                }
                for k in lowest {
                    parts[k] += each;
                    headroom -= each;
                }
            }
            parts
        } else {
            // Over the limit (it was lowered): no shard admits until the
            // account is under it again, when a read finds the parts stale
            // ([`Self::stale`]) and splits them again.
            vec![0; n]
        };
        parts
            .into_iter()
            .map(|p| u32::try_from(p).unwrap_or(u32::MAX))
            .collect()
    }

    /// Whether parts as stored (`parts[k]`, shard `k`'s, for the shards in
    /// use) should be split again over the jobs counted now (`in_flight`,
    /// every shard that may count one) under `limit`:
    /// - they admit fewer jobs than the account has room for (jobs of
    ///   shards a lower `S` left have ended, or the account fell back under
    ///   a lowered limit), or
    /// - a shard is full under a part below its even one, and a split over
    ///   these counts would give it room (parts a split over uneven counts
    ///   left, as after `S` was raised beside a full shard).
    ///
    /// Never for parts as a split over these counts writes them, and not
    /// for a shard full under its even part: a read splits again only
    /// while the parts hold back what the account may admit.
    pub fn stale(self, limit: Option<u32>, parts: &[Option<u32>], in_flight: &[i64]) -> bool {
        let Some(limit) = limit else {
            return false;
        };
        let count = |k: usize| in_flight.get(k).copied().unwrap_or(0).max(0);
        let total: i64 = (0..in_flight.len()).map(count).sum();
        let room = i64::from(limit) - total;
        if room <= 0 {
            return false;
        }
        let part = |k: u16| i64::from(parts.get(usize::from(k)).copied().flatten().unwrap_or(0));
        let jobs = |k: u16| count(usize::from(k));
        let admits: i64 = self.all().map(|k| (part(k) - jobs(k)).max(0)).sum();
        if admits < room {
            return true;
        }
        let fresh = self.split(limit, in_flight);
        self.all().any(|k| {
            part(k) <= jobs(k) && part(k) < i64::from(self.part(limit, k)) && i64::from(fresh[usize::from(k)]) > jobs(k)
        })
    }

    /// The shard's capacity: its own counts (`counts`' counters), under its
    /// part of each of the account's limits (`whole`'s).
    pub fn capacity_of(self, shard: u16, whole: &AccountCapacity, counts: &AccountCapacity) -> AccountCapacity {
        let part = |l: Option<u32>| l.map(|l| self.part(l, shard));
        AccountCapacity {
            configured: part(whole.configured),
            set_limit: part(whole.set_limit),
            learned: part(whole.learned),
            learned_mark: 0,
            raise_every: None,
            learned_at_ms: None,
            ..*counts
        }
    }
}

/// The whole account from its shards: counters and limits added up (the
/// limits' parts add up to the limits). A limit none of the shards holds is
/// none.
pub fn summed(shards: &[AccountCapacity]) -> AccountCapacity {
    let limit = |f: fn(&AccountCapacity) -> Option<u32>| {
        shards
            .iter()
            .filter_map(f)
            .fold(None, |sum: Option<u32>, l| Some(sum.unwrap_or(0).saturating_add(l)))
    };
    AccountCapacity {
        in_flight: shards.iter().map(|s| s.in_flight).sum(),
        waiting: shards.iter().map(|s| s.waiting).sum(),
        queued: shards.iter().map(|s| s.queued).sum(),
        configured: limit(|s| s.configured),
        set_limit: limit(|s| s.set_limit),
        learned: limit(|s| s.learned),
        jobs_ended: shards.iter().map(|s| s.jobs_ended).sum(),
        learned_mark: shards.iter().map(|s| s.learned_mark).sum(),
        raise_every: shards.iter().find_map(|s| s.raise_every),
        learned_at_ms: shards.iter().find_map(|s| s.learned_at_ms),
    }
}

/// The shard to which a claim of a woken operation goes: its own while it
/// has a free slot, else the shard with the most, else its own (where it
/// is refused and waits again). `shards[k]` is shard `k`'s capacity.
pub fn woken_claim_shard(home: u16, shards: &[AccountCapacity]) -> u16 {
    let free = |s: &AccountCapacity| s.free_slots().unwrap_or(u64::MAX);
    if shards.get(usize::from(home)).is_none_or(|s| s.has_room()) {
        return home;
    }
    shards
        .iter()
        .enumerate()
        .filter(|(_, s)| s.has_room())
        .max_by_key(|(k, s)| (free(s), std::cmp::Reverse(*k)))
        .and_then(|(k, _)| u16::try_from(k).ok())
        .unwrap_or(home)
}

/// How one write moves one shard's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountMove {
    pub shard: u16,
    pub in_flight: i64,
    pub waiting: i64,
    pub queued: i64,
    /// A job Genace ran for us ended on this shard ([`ledger::ends_a_job`]).
    pub ends_a_job: bool,
    /// A claim takes a slot on this shard: written only while the shard has
    /// a free slot under its part of every limit.
    pub admits: bool,
    /// With `admits`: the claim did not wait for a slot, so it also yields
    /// to the operations waiting on this shard.
    pub yields: bool,
}

/// How the write of `next` over `prev` moves the account's shards: the
/// counters of `prev`'s share leave the shard that counted it, and those of
/// `next`'s join the shard `next` names. One move when both are the same
/// shard, none when nothing moves.
pub fn account_moves(prev: &OperationRecord, next: &OperationRecord) -> Result<Vec<AccountMove>, Overflow> {
    let (before, after) = (ledger::share(prev), ledger::share(next));
    let (from, to) = (prev.account_shard.unwrap_or(0), next.account_shard.unwrap_or(0));
    let counters = |s: &Shares, shard| AccountMove {
        shard,
        in_flight: s.in_flight,
        waiting: s.waiting,
        queued: s.queued,
        ..AccountMove::default()
    };
    let mut moves = if from == to {
        vec![counters(&after.minus(&before)?, to)]
    } else {
        let zero = Shares::default();
        vec![counters(&zero.minus(&before)?, from), counters(&after, to)]
    };
    let claim = ledger::reserves(prev, next) && after.in_flight > before.in_flight;
    for m in &mut moves {
        m.ends_a_job = m.shard == from && ledger::ends_a_job(prev, next);
        m.admits = claim && m.shard == to;
        m.yields = m.admits && before.queued == 0;
    }
    moves.retain(|m| m.in_flight != 0 || m.waiting != 0 || m.queued != 0);
    Ok(moves)
}

/// Whether the write of `next` over `prev` moves any counter: the tenant's
/// ([`ledger::delta`]) or an account shard's ([`account_moves`]; a record
/// whose wait moves to another shard moves no tenant counter). Such a
/// write is one transaction with the counters it moves.
pub fn moves_counters(prev: &OperationRecord, next: &OperationRecord) -> Result<bool, Overflow> {
    Ok(!ledger::delta(prev, next)?.is_zero() || !account_moves(prev, next)?.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Input, Policy, transition};
    use crate::record::sample_prepared;

    fn shards(n: u16) -> AccountShards {
        AccountShards::new(n).unwrap()
    }

    #[test]
    fn parts_add_up_to_the_limit_and_the_remainder_goes_first() {
        for n in 1..=8u16 {
            for limit in 0..40u32 {
                let parts: Vec<u32> = shards(n).all().map(|k| shards(n).part(limit, k)).collect();
                assert_eq!(parts.iter().sum::<u32>(), limit, "{n} shards, limit {limit}");
                assert!(parts.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1));
            }
        }
        assert_eq!(shards(4).part(10, 0), 3);
        assert_eq!(shards(4).part(10, 3), 2);
        assert!(AccountShards::new(0).is_none() && AccountShards::new(MAX_ACCOUNT_SHARDS + 1).is_none());
    }

    /// The split over counts never lets a claim take the account past the
    /// limit: after it, each shard in use admits up to its part, so the
    /// account's jobs reach at most the parts plus the jobs of shards out
    /// of use, which is the limit, or, over it, what they were.
    #[test]
    fn a_split_over_counts_holds_the_account_to_its_limit() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut draw = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..20_000 {
            let s = shards(1 + draw(6) as u16);
            let span = usize::from(s.get()).max(1 + draw(6) as usize);
            let limit = draw(30) as u32;
            let counts: Vec<i64> = (0..span).map(|_| draw(8) as i64).collect();
            let parts = s.split(limit, &counts);
            assert_eq!(parts.len(), usize::from(s.get()));
            let stored: Vec<Option<u32>> = parts.iter().map(|p| Some(*p)).collect();
            assert!(
                !s.stale(Some(limit), &stored, &counts),
                "{s:?} {limit} {counts:?}: {parts:?}"
            );
            let total: i64 = counts.iter().sum();
            let most: i64 = parts
                .iter()
                .enumerate()
                .map(|(k, p)| counts[k].max(i64::from(*p)))
                .sum::<i64>()
                + counts[usize::from(s.get())..].iter().sum::<i64>();
            assert!(
                most <= i64::from(limit).max(total),
                "{s:?} limit {limit} counts {counts:?}: parts {parts:?} admit to {most}"
            );
            if total <= i64::from(limit) {
                // Nothing is lost but the jobs of shards out of use.
                let retired: i64 = counts[usize::from(s.get())..].iter().sum();
                assert_eq!(
                    parts.iter().map(|p| i64::from(*p)).sum::<i64>(),
                    i64::from(limit) - retired
                );
            }
        }
        // Stale: after the retired shards' jobs end, after the account falls
        // back under a lowered limit, and while a raise's uneven parts keep
        // a shard full that a split would open; never right after a split.
        let four = shards(4);
        let some = |v: &[u32]| v.iter().map(|p| Some(*p)).collect::<Vec<_>>();
        assert!(four.stale(Some(10), &some(&[10, 0, 0, 0]), &[9, 0, 0, 0]));
        assert!(!four.stale(Some(10), &some(&[10, 0, 0, 0]), &[10, 0, 0, 0]));
        assert!(
            !four.stale(Some(10), &some(&[1, 0, 0, 9]), &[0, 0, 0, 9]),
            "a split gives the same"
        );
        assert!(
            shards(2).stale(Some(10), &some(&[3, 2]), &[1, 1, 0, 0]),
            "retired jobs ended"
        );
        assert!(
            shards(2).stale(Some(4), &some(&[0, 0]), &[2, 1]),
            "back under a lowered limit"
        );
        assert!(!shards(2).stale(Some(4), &some(&[0, 0]), &[3, 2]), "still over it");
        assert!(!four.stale(None, &some(&[0, 0, 0, 0]), &[0, 0, 0, 0]), "no limit");
        // The example of decision 3: from one shard to four while shard 0
        // holds 10 of 10 jobs, the new shards admit nothing.
        assert_eq!(shards(4).split(10, &[10]), vec![10, 0, 0, 0]);
        assert_eq!(shards(4).split(10, &[4]), vec![4, 2, 2, 2]);
        assert_eq!(shards(4).split(10, &[]), vec![3, 3, 2, 2], "even, as before");
        assert_eq!(shards(4).split(10, &[1, 2, 0, 1]), vec![3, 3, 2, 2]);
        // Lowered to 4 under 10 jobs: no shard admits while over it.
        assert_eq!(shards(2).split(4, &[6, 4]), vec![0, 0]);
        // From four to two: the jobs of shards 2 and 3 are charged.
        assert_eq!(shards(2).split(10, &[1, 1, 3, 2]), vec![3, 2]);
        assert_eq!(shards(3).split(100_000, &[5, 0, 0]), vec![33_334, 33_333, 33_333]);
    }

    #[test]
    fn homes_spread_and_stay_where_counted() {
        let now = chrono::Utc::now();
        let mut seen = [0u32; 4];
        for i in 0..400 {
            let mut rec = sample_prepared(now);
            let key = crate::domain::OperationKey::parse(&format!("key-{i}")).unwrap();
            rec.operation_id = crate::domain::OperationId::derive(&rec.tenant_id, &key);
            seen[usize::from(shards(4).home(&rec))] += 1;
            rec.account_shard = Some(2);
            assert_eq!(shards(4).home(&rec), 2);
            assert!(shards(2).home(&rec) < 2, "a shard out of use is not home");
        }
        assert!(seen.iter().all(|n| (60..140).contains(n)), "{seen:?}");
    }

    fn capacity(in_flight: i64, configured: u32) -> AccountCapacity {
        AccountCapacity {
            in_flight,
            configured: Some(configured),
            ..AccountCapacity::default()
        }
    }

    #[test]
    fn a_woken_claim_goes_home_while_home_has_room() {
        let shards = [capacity(2, 2), capacity(0, 2), capacity(1, 2)];
        assert_eq!(woken_claim_shard(2, &shards), 2);
        assert_eq!(woken_claim_shard(0, &shards), 1, "the shard with most room");
        assert_eq!(woken_claim_shard(0, &[capacity(2, 2), capacity(2, 2)]), 0, "none: home");
        let sum = summed(&shards);
        assert_eq!((sum.in_flight, sum.configured), (3, Some(6)));
    }

    #[test]
    fn a_claim_waits_ends_and_moves_on_the_shards_its_record_names() {
        let now = chrono::Utc::now();
        let policy = Policy::default();
        let rec = sample_prepared(now);
        let claimed =
            |r: &OperationRecord, shard| transition(r, Input::ClaimDispatch { token: "t", shard }, now, &policy);
        // A fresh claim on shard 3 admits there and yields to its waiters.
        let on_three = claimed(&rec, 3).unwrap();
        let moves = account_moves(&rec, &on_three).unwrap();
        assert_eq!(moves.len(), 1);
        assert_eq!(
            (moves[0].shard, moves[0].in_flight, moves[0].admits, moves[0].yields),
            (3, 1, true, true)
        );
        // A wait is counted on its home; a woken claim elsewhere moves it.
        let mut waiting = transition(&rec, Input::CapacityReached, now, &policy).unwrap();
        waiting.account_shard = Some(1);
        let moved = claimed(&waiting, 2).unwrap();
        let moves = account_moves(&waiting, &moved).unwrap();
        assert_eq!(moves.len(), 2);
        assert_eq!(
            (moves[0].shard, moves[0].queued, moves[0].waiting, moves[0].admits),
            (1, -1, -1, false)
        );
        assert_eq!(
            (moves[1].shard, moves[1].in_flight, moves[1].admits, moves[1].yields),
            (2, 1, true, false)
        );
        // Its end frees shard 2, whatever shard its record named before.
        let mut ended = moved.clone();
        ended.phase = crate::record::Phase::Prepared;
        ended.claim = None;
        let moves = account_moves(&moved, &ended).unwrap();
        assert_eq!((moves.len(), moves[0].shard, moves[0].in_flight), (1, 2, -1));
        // Nothing of the account's moves: no move.
        assert!(account_moves(&rec, &rec).unwrap().is_empty());
    }
}
