//! The ports: what the stages need from the world, as small traits that
//! the AWS, HTTP and in-memory adapters implement, and the plain types
//! they exchange. Nothing here imports the pipeline or the API.
//!
//! - [`table`]: the operation table (records, ledgers, webhook settings,
//!   the case filters); [`commit`]: the loop every state change goes through;
//!   [`list`]: what a listing selects and its order.
//! - [`queue`]: the work queues and the recovery channel.
//! - [`sort_keys`]: index sort keys both stores build alike.
//! - [`outputs`]: the output bucket and its key layout.
//! - [`genace`] and [`downloads`]: Genace's API and its output files.
//! - [`webhooks`]: webhook secrets, the sender and the copy queue.
//! - [`traces`]: where operators read an operation's trace.
//! - [`clock`], [`deadline`] (the invocation's), [`metrics`], [`cursor`]
//!   (sealed list cursors).
//! - [`Ports`]: the bundle every stage is generic over, and [`Parts`], its
//!   one implementation.

pub mod clock;
pub mod commit;
pub mod cursor;
pub mod deadline;
pub mod downloads;
pub mod genace;
pub mod list;
pub mod metrics;
pub mod outputs;
pub mod queue;
pub mod sort_keys;
pub mod table;
pub mod traces;
pub mod webhooks;

use std::marker::PhantomData;

use clock::{Clock, SystemClock};
use outputs::ObjectStore;
use queue::WorkQueue;
use table::OperationStore;

/// The adapters a stage is built on, named once: every stage and API type
/// is generic over one `P: Ports` rather than over each adapter. Genace and
/// the downloads are unbounded here and bounded where they are called
/// (dispatch and poll; deliver), so a function that never calls them names
/// [`Unused`] and builds no client for them.
pub trait Ports: Send + Sync + 'static {
    type Store: OperationStore;
    type Queue: WorkQueue;
    type Objects: ObjectStore;
    type Genace: Send + Sync;
    type Downloads: Send + Sync;
    type Clock: Clock;
}

/// The one implementation of [`Ports`]: a list of adapter types, nothing
/// held. `Parts<DynamoStore, SqsQueue, S3Store, GenaceClient, HttpDownloads>`
/// is the deployed set; tests and the simulator name in-memory and chaotic
/// ones.
#[allow(
    clippy::type_complexity,
    reason = "a marker that names six types and holds none: `fn() -> T` keeps it Send and Sync"
)]
pub struct Parts<S, Q, O, G = Unused, D = Unused, C = SystemClock>(PhantomData<fn() -> (S, Q, O, G, D, C)>);

impl<S, Q, O, G, D, C> Ports for Parts<S, Q, O, G, D, C>
where
    S: OperationStore + 'static,
    Q: WorkQueue + 'static,
    O: ObjectStore + 'static,
    G: Send + Sync + 'static,
    D: Send + Sync + 'static,
    C: Clock + 'static,
{
    type Store = S;
    type Queue = Q;
    type Objects = O;
    type Genace = G;
    type Downloads = D;
    type Clock = C;
}

/// The place of a port that a function never uses (no Genace client in
/// intake, deliver, recovery or the sweep; no download client outside
/// deliver): nothing is built, and no key is read.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unused;
