"""HTTP front-ends: thin modules that parse a wire format, call one core operation, and render the result."""
