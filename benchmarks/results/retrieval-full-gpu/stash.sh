# One carrying call of several (a GGUF larger than a call's 64 MiB goes in pieces): what the call carried in the
# folder $1 is kept in /tmp/w until the last call, which must follow within the machine's 30 s warm window.
mkdir -p /tmp/w && cp "$1"/* /tmp/w/ && ls -la /tmp/w
