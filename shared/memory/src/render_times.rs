//! The learned render times, in memory: one histogram per class.

use genace_core::render::{RenderClass, RenderTimes};

use super::store::MemoryStore;
use genace_stages::ports::table::{RenderTimeLog, StoreError};

impl RenderTimeLog for MemoryStore {
    async fn render_times(&self, class: &RenderClass) -> Result<RenderTimes, StoreError> {
        Ok(self.lock().render_times.get(class).cloned().unwrap_or_default())
    }

    async fn add_render_time(&self, class: &RenderClass, seconds: f64) -> Result<(), StoreError> {
        self.lock().render_times.entry(class.clone()).or_default().add(seconds);
        Ok(())
    }
}
