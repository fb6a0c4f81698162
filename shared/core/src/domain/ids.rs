//! The identifiers: a tenant, an operation's key and id, a Genace job id.
//! Each exists only in a valid form.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::input::{InvalidInput, hex, visible_ascii};

/// A job id Genace gave us: 1-256 visible ASCII characters. Anything longer
/// or stranger is not stored as an id (it is kept as evidence instead).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RemoteJobId(String);

impl RemoteJobId {
    pub const MAX_LEN: usize = 256;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !visible_ascii(raw) {
            return Err(InvalidInput::new(
                "job_id",
                format!("must be 1-{} visible ASCII characters", Self::MAX_LEN),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// The owner of an operation, taken from the authenticated principal only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TenantId(String);

impl TenantId {
    pub const MAX_LEN: usize = 128;

    /// The character a tenant id may not hold: `#` joins the parts of the
    /// table's composite keys (`WHEVENT#<tenant>#<event id>` and the like).
    /// Without it, a key that starts with a tenant id names one tenant
    /// only, and no tenant can reach another's items through an id of its
    /// own choosing. (`/`, which joins secret names, stays allowed: a
    /// secret's owner is read from its whole folder.)
    pub const SEPARATOR: char = '#';

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !visible_ascii(raw) || raw.contains(Self::SEPARATOR) {
            return Err(InvalidInput::new(
                "tenant",
                format!("must be 1-{} visible ASCII characters, without '#'", Self::MAX_LEN),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for TenantId {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<TenantId> for String {
    fn from(value: TenantId) -> Self {
        value.0
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The application's name for one business intent, unique per tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperationKey(String);

impl OperationKey {
    pub const MAX_LEN: usize = 255;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !visible_ascii(raw) {
            return Err(InvalidInput::new(
                "operation_key",
                format!("must be 1-{} visible ASCII characters", Self::MAX_LEN),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for OperationKey {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<OperationKey> for String {
    fn from(value: OperationKey) -> Self {
        value.0
    }
}

/// Our identifier of an operation. It is derived from the tenant and the
/// operation key, so the uniqueness constraint *is* the table's primary key.
/// It is never sent to Genace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct OperationId(String);

impl OperationId {
    const PREFIX: &'static str = "op_";
    const HEX_LEN: usize = 32;

    pub fn derive(tenant: &TenantId, key: &OperationKey) -> Self {
        let mut h = Sha256::new();
        h.update(b"genace-operation-id/v1\0");
        h.update(tenant.as_str().as_bytes());
        h.update(b"\0");
        h.update(key.as_str().as_bytes());
        let digest = h.finalize();
        Self(format!("{}{}", Self::PREFIX, &hex(&digest)[..Self::HEX_LEN]))
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        let ok = raw
            .strip_prefix(Self::PREFIX)
            .is_some_and(|h| h.len() == Self::HEX_LEN && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        if !ok {
            return Err(InvalidInput::new("operation_id", "is not an operation id"));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A stable small number derived from the id, used to spread the sweep's
    /// due-time index over several partitions.
    pub fn shard(&self, shards: u32) -> u32 {
        let tail = &self.0[self.0.len() - 8..];
        u32::from_str_radix(tail, 16).unwrap_or(0) % shards.max(1)
    }
}

impl TryFrom<String> for OperationId {
    type Error = InvalidInput;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(&value)
    }
}

impl From<OperationId> for String {
    fn from(value: OperationId) -> Self {
        value.0
    }
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
