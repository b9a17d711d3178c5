//! Plan language and DAG compiler. Not built yet: see issue 3. Pure; depends only on `oracle_core`.
