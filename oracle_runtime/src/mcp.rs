//! A synchronous Model Context Protocol client over stdio: placeholder until it lands.
