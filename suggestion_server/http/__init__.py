"""The HTTP surface below the routes: request bodies and their schemas, the compact wire format,
bearer-token authentication, TLS, and the connection protocol."""
