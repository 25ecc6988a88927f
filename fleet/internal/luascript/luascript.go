// Package luascript holds the Lua source of the fleet's Redis scripts
// that more than one program runs: the fleet itself, and the client
// comparison in fleet/clientcmp, which measures the same script.
package luascript

// Lease takes up to n places from a host's GCRA bucket, or when none is
// free reserves the next one if it comes within maxWait. It answers
// {granted, wait in µs, paused (1) or not (0)}.
//
// KEYS: the bucket (its theoretical arrival time, ms), the pause hash.
// ARGV: emission (ms), burst, n, maxWait (ms), resource.
const Lease = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
local p = redis.call('HMGET', KEYS[2], 'p:', 'p:' .. ARGV[5])
local pause = math.max(tonumber(p[1] or 0) or 0, tonumber(p[2] or 0) or 0)
if pause > now then return {0, math.ceil((pause - now) * 1000), 1} end
local em, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or 0) or 0
if tat < now then tat = now end
local k = math.min(math.floor((now + burst * em - tat) / em), n)
local wait = 0
if k < 1 then
  wait = tat + em - burst * em - now
  if wait > tonumber(ARGV[4]) then return {0, math.ceil(wait * 1000), 0} end
  k = 1
end
tat = tat + k * em
redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil(tat - now) + 1000)
return {k, math.ceil(wait * 1000), 0}`
