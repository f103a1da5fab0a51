"""HTTP surface: request/response schemas, routes and the SSE writer."""
