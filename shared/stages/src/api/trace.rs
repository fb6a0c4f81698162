//! An operation's trace, for an operator who may see the operation.

use genace_core::domain::OperationId;
use genace_core::trace::TraceId;

use crate::api::errors::OperationError;
use crate::api::operator::OperatorApi;
use crate::ports::Ports;
use crate::ports::traces::Trace;

impl<P: Ports> OperatorApi<'_, P> {
    /// The trace of `id` (an operation in the operator's scope, else not
    /// found): its id, and its spans or where it is shown.
    pub async fn trace(&self, id: &OperationId) -> Result<(TraceId, Trace), OperationError> {
        self.get(id).await?;
        let trace = TraceId::of(id);
        let found = self.api.traces.read(&trace).await.map_err(OperationError::Traces)?;
        Ok((trace, found))
    }
}
