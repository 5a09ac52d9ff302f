//! Versioned projection sets on PostgreSQL: one schema per generation.
//!
//! Generation 1 is the `public` schema (where databases projected before generations existed
//! keep their tables); a rebuild writes generation N into the schema `strata_gen_N`. The table
//! `strata_meta.generation` (one row, outside every generation) names the current one:
//!
//! - readers ([`PgStore::open`](super::PgStore::open)) set their connection's `search_path` from
//!   it each time they take a connection from the pool, so a switch reaches them at their next
//!   query; PostgreSQL re-parses a prepared statement whose `search_path` changed;
//! - the projector's batch transaction takes the row `FOR SHARE` and writes into the schema it
//!   names, so no batch can land in a set readers already left;
//! - a switch ([`SwitchLock`]) takes the row `FOR UPDATE` — waiting for the batches in flight and
//!   holding off the next ones — so the rebuild can catch up with the live set's last offsets,
//!   verify and switch with nothing moving underneath.
//!
//! `strata_meta.generation.rebuilding` names the set a rebuild is writing, so that one started
//! after a crash resumes it; an advisory lock held for the rebuild's lifetime keeps two rebuilds
//! from writing the same set.

use std::str::FromStr;

use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection, PgPool, Postgres, Row, Transaction};

use crate::{Error, Result};

/// Schema of the generation pointer, outside every generation.
pub const META_SCHEMA: &str = "strata_meta";
/// Schema of generation 1.
pub const FIRST_GENERATION: &str = "public";
/// Prefix of the schema of generation N > 1.
const GENERATION_PREFIX: &str = "strata_gen_";
/// Advisory lock key serializing the creation of [`META_SCHEMA`] by processes starting at once.
const META_LOCK: i64 = 0x5354_5241_5441_0001;
/// Advisory lock key held by the rebuild under way.
const REBUILD_LOCK: i64 = 0x5354_5241_5441_0002;

/// The tables of a generation (what [`PgGenerations::drop_generation`] removes from `public`).
const GENERATION_TABLES: &[&str] = &[
    "consumer_offsets",
    "session_folds",
    "sessions",
    "branches",
    "events",
    "messages",
    "tool_calls",
    "artifacts",
    "memories",
    "compactions",
    "assemblies",
    "api_keys",
    "_sqlx_migrations",
];

/// Creates the generation pointer when missing (generation 1 current).
pub(crate) async fn ensure_meta(conn: &mut PgConnection) -> Result<()> {
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(META_LOCK)
        .execute(&mut *tx)
        .await?;
    sqlx::query("CREATE SCHEMA IF NOT EXISTS strata_meta")
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS strata_meta.generation (\
         singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton), \
         schema_name TEXT NOT NULL, \
         rebuilding TEXT, \
         switched_at TIMESTAMPTZ)",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO strata_meta.generation (schema_name) VALUES ($1) ON CONFLICT DO NOTHING",
    )
    .bind(FIRST_GENERATION)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The schema of the current generation.
pub(crate) async fn current(conn: &mut PgConnection) -> Result<String> {
    Ok(
        sqlx::query_scalar("SELECT schema_name FROM strata_meta.generation")
            .fetch_one(conn)
            .await?,
    )
}

/// The statement that points a connection at the current generation for the rest of its
/// session (run each time a reader takes a connection from its pool).
pub(crate) const FOLLOW_CURRENT: &str =
    "SELECT set_config('search_path', (SELECT schema_name FROM strata_meta.generation), false)";

/// Points a batch transaction at the current generation and holds it there until the
/// transaction ends (a switch waits for it).
pub(crate) async fn pin_transaction(tx: &mut Transaction<'_, Postgres>) -> Result<()> {
    let schema: String =
        sqlx::query_scalar("SELECT schema_name FROM strata_meta.generation FOR SHARE")
            .fetch_one(&mut **tx)
            .await?;
    sqlx::query("SELECT set_config('search_path', $1, true)")
        .bind(schema)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// A generation's number from its schema: 1 for `public`, N for `strata_gen_N`.
pub fn generation_number(schema: &str) -> Option<u64> {
    if schema == FIRST_GENERATION {
        return Some(1);
    }
    let n: u64 = schema.strip_prefix(GENERATION_PREFIX)?.parse().ok()?;
    // `strata_gen_02` would name the same number as `strata_gen_2`.
    (n > 1 && generation_schema(n) == schema).then_some(n)
}

/// The schema of generation `n`.
pub fn generation_schema(n: u64) -> String {
    if n <= 1 {
        FIRST_GENERATION.into()
    } else {
        format!("{GENERATION_PREFIX}{n}")
    }
}

/// Checks that `schema` names a generation; it is then a plain identifier, safe to splice
/// into SQL.
pub(crate) fn checked(schema: &str) -> Result<&str> {
    match generation_number(schema) {
        Some(_) => Ok(schema),
        None => Err(Error::Generation(format!(
            "{schema:?} is not a projection set (public or strata_gen_N)"
        ))),
    }
}

/// A projection set of a database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PgGeneration {
    /// Its schema.
    pub schema: String,
    /// Its number (1 for `public`).
    pub number: u64,
    /// Whether readers use it.
    pub current: bool,
    /// Whether a rebuild is writing it.
    pub in_progress: bool,
}

/// Administration of a database's projection sets (what `strata rebuild` uses).
#[derive(Debug, Clone)]
pub struct PgGenerations {
    pool: PgPool,
    options: PgConnectOptions,
}

/// The rebuild under way: its set, and the advisory lock that keeps a second rebuild out
/// (released when this is dropped).
#[derive(Debug)]
pub struct RebuildClaim {
    /// The schema being rebuilt.
    pub schema: String,
    /// Whether an interrupted rebuild of it is being resumed.
    pub resumed: bool,
    _lock: PgConnection,
}

/// The generation pointer locked for a switch: the live projector's batches wait until this
/// is switched or dropped (dropping it switches nothing).
#[derive(Debug)]
pub struct SwitchLock {
    tx: Transaction<'static, Postgres>,
    current: String,
}

impl PgGenerations {
    /// Connects to the database of a `postgres://` URL (the projection store's) and creates the
    /// generation pointer when missing.
    pub async fn connect(url: &str) -> Result<Self> {
        let (url, _) = super::split_pool_size(url)?;
        let options = PgConnectOptions::from_str(&url)?;
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(super::ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        ensure_meta(&mut *pool.acquire().await?).await?;
        Ok(Self { pool, options })
    }

    /// The current generation's schema.
    pub async fn current(&self) -> Result<String> {
        current(&mut *self.pool.acquire().await?).await
    }

    /// The projection sets, oldest first.
    pub async fn list(&self) -> Result<Vec<PgGeneration>> {
        let row = sqlx::query("SELECT schema_name, rebuilding FROM strata_meta.generation")
            .fetch_one(&self.pool)
            .await?;
        let (current, rebuilding): (String, Option<String>) = (row.get(0), row.get(1));
        // `public` counts only when it holds projections.
        let schemas: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT table_schema::text FROM information_schema.tables \
             WHERE table_name = 'session_folds' \
             UNION SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'strata\\_gen\\_%'",
        )
        .fetch_all(&self.pool)
        .await?;
        let mut out: Vec<PgGeneration> = schemas
            .into_iter()
            .filter_map(|schema| {
                let number = generation_number(&schema)?;
                Some(PgGeneration {
                    current: schema == current,
                    in_progress: rebuilding.as_deref() == Some(schema.as_str()),
                    schema,
                    number,
                })
            })
            .collect();
        out.sort_by_key(|g| g.number);
        Ok(out)
    }

    /// Claims the set to rebuild: the interrupted rebuild's, else a new generation numbered
    /// after every existing one. Fails when another rebuild holds the claim.
    pub async fn claim_rebuild(&self) -> Result<RebuildClaim> {
        let mut lock = PgConnection::connect_with(&self.options).await?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(REBUILD_LOCK)
            .fetch_one(&mut lock)
            .await?;
        if !got {
            return Err(Error::Generation(
                "another strata rebuild is running against this database".into(),
            ));
        }
        let mut tx = self.pool.begin().await?;
        let row =
            sqlx::query("SELECT schema_name, rebuilding FROM strata_meta.generation FOR UPDATE")
                .fetch_one(&mut *tx)
                .await?;
        let (current, rebuilding): (String, Option<String>) = (row.get(0), row.get(1));
        if let Some(schema) = rebuilding.filter(|s| *s != current) {
            checked(&schema)?;
            tx.commit().await?;
            return Ok(RebuildClaim {
                schema,
                resumed: true,
                _lock: lock,
            });
        }
        let next = self
            .list()
            .await?
            .iter()
            .map(|g| g.number)
            .chain(generation_number(&current))
            .max()
            .unwrap_or(1)
            + 1;
        let schema = generation_schema(next);
        sqlx::query("UPDATE strata_meta.generation SET rebuilding = $1")
            .bind(&schema)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(RebuildClaim {
            schema,
            resumed: false,
            _lock: lock,
        })
    }

    /// Locks the generation pointer for a switch (see [`SwitchLock`]); waits for the live
    /// projector's batch in flight, if any.
    pub async fn lock_for_switch(&self) -> Result<SwitchLock> {
        let mut tx = self.pool.begin().await?;
        let current: String =
            sqlx::query_scalar("SELECT schema_name FROM strata_meta.generation FOR UPDATE")
                .fetch_one(&mut *tx)
                .await?;
        Ok(SwitchLock { tx, current })
    }

    /// Drops a projection set readers no longer use and no rebuild is writing.
    pub async fn drop_generation(&self, schema: &str) -> Result<()> {
        let schema = checked(schema)?;
        let mut tx = self.pool.begin().await?;
        let row =
            sqlx::query("SELECT schema_name, rebuilding FROM strata_meta.generation FOR UPDATE")
                .fetch_one(&mut *tx)
                .await?;
        let (current, rebuilding): (String, Option<String>) = (row.get(0), row.get(1));
        if current == schema {
            return Err(Error::Generation(format!(
                "{schema} is the current projection set: readers use it"
            )));
        }
        if rebuilding.as_deref() == Some(schema) {
            return Err(Error::Generation(format!(
                "{schema} is being rebuilt: finish the rebuild first"
            )));
        }
        if !self.list().await?.iter().any(|g| g.schema == schema) {
            return Err(Error::Generation(format!("no projection set {schema}")));
        }
        if schema == FIRST_GENERATION {
            // The schema itself stays: it is the database's default and may hold other things.
            for table in GENERATION_TABLES {
                sqlx::query(&format!("DROP TABLE IF EXISTS public.{table} CASCADE"))
                    .execute(&mut *tx)
                    .await?;
            }
        } else {
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

impl SwitchLock {
    /// The schema readers use now.
    pub fn current(&self) -> &str {
        &self.current
    }

    /// Makes `schema` current: copies the operator's API keys into it (they are not on the log)
    /// and rewrites the pointer, in one transaction. Readers follow at their next query.
    pub async fn switch_to(mut self, schema: &str) -> Result<()> {
        let schema = checked(schema)?;
        let from = checked(&self.current)?.to_owned();
        sqlx::query(&format!(
            "INSERT INTO {schema}.api_keys SELECT * FROM {from}.api_keys ON CONFLICT DO NOTHING"
        ))
        .execute(&mut *self.tx)
        .await?;
        sqlx::query(
            "UPDATE strata_meta.generation SET schema_name = $1, rebuilding = NULL, \
             switched_at = now()",
        )
        .bind(schema)
        .execute(&mut *self.tx)
        .await?;
        self.tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_names_round_trip_and_nothing_else_is_one() {
        assert_eq!(generation_number("public"), Some(1));
        assert_eq!(generation_number("strata_gen_2"), Some(2));
        assert_eq!(generation_schema(7), "strata_gen_7");
        assert_eq!(generation_schema(1), "public");
        for bad in [
            "strata_gen_1",
            "strata_gen_02",
            "strata_gen_",
            "strata_gen_2; DROP TABLE x",
            "Public",
            "strata_meta",
        ] {
            assert_eq!(generation_number(bad), None, "{bad}");
            assert!(checked(bad).is_err(), "{bad}");
        }
    }
}
