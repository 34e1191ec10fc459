# Call 1 of 2 (one lent H200, from the checkout root): the first part of SmolLM2-135M's GGUF (it is 98 MB, a call
# carries 64 MiB), the two tasks as `retrieval_full.py export` wrote them (gzipped), the transformers and gguf
# wheels, kept in /tmp/w for call 2, which must follow within the machine's 30 s warm window.
mkdir -p /tmp/w && cp .rf1/* /tmp/w/ && ls -la /tmp/w
