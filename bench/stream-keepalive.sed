# A trial of the credential proxy with a keepalive pool to its upstream, for
# `BENCH_STREAM_NGINX=bench/stream-keepalive.sed BENCH_ONLY=stream bench/run`
# (BENCHMARKS.md, "Streamed answers through the credential proxy"): nginx
# picks an upstream group named like the value of proxy_pass's variable
# host, so `proxy_pass https://$api_host` then reuses its connections to
# the bench's upstream (a fixed address here: the router's nginx 1.26 has
# no `resolve` for upstream servers).
/^http {/a\
    # Trial (bench/stream-keepalive.sed): a keepalive pool to the API host.\
    upstream api.bench.test {\
        server 10.99.0.20:443;\
        keepalive 8;\
    }
