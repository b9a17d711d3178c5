//! `oracle-mcp-example`: placeholder until the server lands.

fn main() {}
