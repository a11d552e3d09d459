# The shell side of the code interpreter's stdio protocol (see pydriver.py), for
# bash or, where there is none, a POSIX sh: run as `bash -c <this file> driver
# <nonce>`. Each request line is a cell's code in base64; it runs through
# `eval` in a function of this one shell, so variables, functions, the working
# directory and options persist across cells. SIGINT returns from the cell
# (status 130) and is ignored between cells. The cell's stdin is /dev/null.
__x_nonce=$1
__x_cell() {
    eval "$1"
}
__x_frame() {
    printf '\036%s:%s\n' "$__x_nonce" "$1"
}
trap '' INT
__x_frame '{"t":"ready"}'
while IFS= read -r __x_line; do
    if ! __x_code=$(printf '%s' "$__x_line" | base64 -d 2>/dev/null); then
        __x_frame '{"t":"error","ename":"ProtocolError","evalue":"bad request","traceback":"bad request"}'
        __x_frame '{"t":"done","ok":false,"status":2}'
        printf '\036%s:end\n' "$__x_nonce" >&2
        continue
    fi
    trap 'return 130' INT
    __x_cell "$__x_code" </dev/null
    __x_status=$?
    trap '' INT
    if [ "$__x_status" -eq 0 ]; then __x_ok=true; else __x_ok=false; fi
    __x_frame "{\"t\":\"done\",\"ok\":$__x_ok,\"status\":$__x_status}"
    printf '\036%s:end\n' "$__x_nonce" >&2
done
