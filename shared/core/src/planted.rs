//! Known bugs that can be planted again, to prove the simulator finds
//! them. Only a build with the feature `planted-bugs` can turn one on (the
//! simulator's); every other build reads them as off.

/// A dispatch claim whose lease lapsed is claimed again and POSTs again,
/// instead of becoming `uncertain` with a case.
pub const REPOST_AFTER_LEASE: u32 = 1;
/// A case is opened whatever the phase (a racing poll on a rendered or
/// delivered record).
pub const CASE_WITHOUT_PHASE_CHECK: u32 = 2;
/// An abandoned operation counts as nothing, whatever its job cost (the
/// ledger before it followed the job).
pub const ABANDON_ERASES_CREDITS: u32 = 4;
/// A negative `held_credits` in a 202 is believed.
pub const TRUST_NEGATIVE_CREDITS: u32 = 8;
/// A failed render counts as spent.
pub const RENDER_FAILED_SPENT: u32 = 16;
/// An accepted job holds nothing: the hold ends at the 202.
pub const ACCEPTED_HOLDS_NOTHING: u32 = 32;
/// Intake answers a changed specification as a replay of the stored one.
pub const REPLAY_CHANGED_SPEC: u32 = 64;
/// Intake answers a changed specification as a new operation, without
/// storing it.
pub const CHANGED_SPEC_ANSWERED_NEW: u32 = 128;
/// Intake answers a new intent with an id minted for the request, not
/// the stored record's.
pub const OPERATION_ID_PER_SUBMIT: u32 = 256;
/// A failed render keeps its slot of Genace's capacity.
pub const RENDER_FAILED_KEEPS_SLOT: u32 = 512;
/// A cancel wins after the dispatch claim, while its POST may be under way.
pub const CANCEL_AFTER_CLAIM: u32 = 1024;
/// Dispatch deadlines are not enforced.
pub const DEADLINE_IGNORED: u32 = 2048;

/// A wake-up stops at a tenant's head that is short of credits, instead
/// of passing over it to a smaller operation behind it that fits.
pub const WAKE_STOPS_AT_SHORT_HEAD: u32 = 4096;

/// A poll reads Genace before it reads the record, so a poll that began
/// after the job was seen to end still GETs it.
pub const POLL_AFTER_END: u32 = 8192;
/// The poll plan never gives way to the age-based schedule: a job is
/// looked at every second however long it runs.
pub const LOOKS_UNBOUNDED: u32 = 16384;
/// A look that read nothing leaves the sweep's deadline where it was, so a
/// long Retry-After or the age-based delay of an old job passes it and the
/// sweep starts a second chain of looks.
pub const DEADLINE_UNMOVED: u32 = 32768;
/// The intent's fingerprint leaves out its media type, so the same key
/// sent again as an image of the same specification is answered as a
/// replay of the video.
pub const FINGERPRINT_SKIPS_MEDIA_TYPE: u32 = 65536;
/// A raise of the learned account limit that could not be saved (the
/// account item held by a transaction) fails the wake-up that tried it,
/// instead of letting it go on under the limit as read.
pub const RAISE_FAILURE_ABORTS_WAKE: u32 = 131_072;
/// The look after a recorded wait for a slot finds waiters only through
/// the wait indexes, which seldom show a wait written moments ago, and
/// never wakes the operation that just waited by its id.
pub const LOOK_AFTER_WAIT_BY_INDEX: u32 = 262_144;
/// A status read answered 429 waits its `Retry-After` for the next look,
/// but the sweep's deadline covers only the delay the plan or the job's
/// age asks: past it, the sweep starts a second chain of looks.
pub const RETRY_AFTER_UNCOVERED: u32 = 524_288;
/// The sweep's page bound counts the items of every shard together, not
/// the pages of each: under a backlog longer than a page, a run stops
/// before it reaches the later shards.
pub const PAGE_BOUND_ACROSS_SHARDS: u32 = 1_048_576;
/// A job id whose acceptance could not be saved goes to the log alone,
/// not to the recovery queue.
pub const RECOVERY_SKIPPED: u32 = 2_097_152;
/// The invocation's deadline is never read: a claim, a POST and the save
/// of its answer start however little of the invocation is left.
pub const DEADLINE_UNREAD: u32 = 4_194_304;
/// A split of the account's limits for a new shard count, or of an
/// operator's limit, is even, whatever jobs each shard counts: the new
/// shards admit their parts beside a full one.
pub const SPLIT_EVEN: u32 = 8_388_608;
/// Lowered to one shard, the account's limits are written whole on it:
/// the jobs that the shards a larger count left still count are not
/// charged to them, and shard 0 admits the whole limit beside them.
pub const ONE_SHARD_WHOLE: u32 = 16_777_216;
/// A wait for credits begun while its tenant's jobs run gets no look once
/// the wait indexes show it: a job's end just after the wait frees the
/// credits, and its wake-up, reading indexes that do not show the wait
/// yet, wakes nobody.
pub const CREDIT_WAIT_UNSETTLED: u32 = 33_554_432;
/// A sweep run its time budget cuts short does not record where it
/// stopped: the next starts at the minute's shard, and a shard both pass
/// over waits a third run.
pub const SWEEP_START_UNSAVED: u32 = 67_108_864;

/// Every planted bug by the name `scripts/simulate.sh --bug` takes.
pub const ALL: [(&str, u32); 27] = [
    ("repost", REPOST_AFTER_LEASE),
    ("case", CASE_WITHOUT_PHASE_CHECK),
    ("abandon-erases-credits", ABANDON_ERASES_CREDITS),
    ("trust-negative-credits", TRUST_NEGATIVE_CREDITS),
    ("render-failed-spent", RENDER_FAILED_SPENT),
    ("accepted-holds-nothing", ACCEPTED_HOLDS_NOTHING),
    ("replay-changed-spec", REPLAY_CHANGED_SPEC),
    ("changed-spec-answered-new", CHANGED_SPEC_ANSWERED_NEW),
    ("operation-id-per-submit", OPERATION_ID_PER_SUBMIT),
    ("render-failed-keeps-slot", RENDER_FAILED_KEEPS_SLOT),
    ("cancel-after-claim", CANCEL_AFTER_CLAIM),
    ("deadline-ignored", DEADLINE_IGNORED),
    ("wake-stops-at-short-head", WAKE_STOPS_AT_SHORT_HEAD),
    ("poll-after-end", POLL_AFTER_END),
    ("looks-unbounded", LOOKS_UNBOUNDED),
    ("deadline-unmoved", DEADLINE_UNMOVED),
    ("fingerprint-skips-media-type", FINGERPRINT_SKIPS_MEDIA_TYPE),
    ("raise-failure-aborts-wake", RAISE_FAILURE_ABORTS_WAKE),
    ("look-after-wait-by-index", LOOK_AFTER_WAIT_BY_INDEX),
    ("retry-after-uncovered", RETRY_AFTER_UNCOVERED),
    ("page-bound-across-shards", PAGE_BOUND_ACROSS_SHARDS),
    ("recovery-skipped", RECOVERY_SKIPPED),
    ("deadline-unread", DEADLINE_UNREAD),
    ("split-even", SPLIT_EVEN),
    ("one-shard-whole", ONE_SHARD_WHOLE),
    ("credit-wait-unsettled", CREDIT_WAIT_UNSETTLED),
    ("sweep-start-unsaved", SWEEP_START_UNSAVED),
];

// Per thread: a simulation runs its world on one thread (a current-thread
// runtime), so tests that plant different bugs can run side by side.
#[cfg(feature = "planted-bugs")]
thread_local! {
    static ON: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Turns on exactly the bugs in `bugs` (0: none), on this thread.
#[cfg(feature = "planted-bugs")]
pub fn set(bugs: u32) {
    ON.with(|on| on.set(bugs));
}

/// Whether `bug` is planted on this thread.
pub fn on(_bug: u32) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        ON.with(|on| on.get() & _bug != 0)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        false
    }
}
