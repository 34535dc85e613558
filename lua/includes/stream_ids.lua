-- A stream entry id's {ms, sequence}.
local function stream_id_parts(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end

-- Whether entry id `a` comes before entry id `b`.
local function stream_id_before(a, b)
  local a_ms, a_seq = stream_id_parts(a)
  local b_ms, b_seq = stream_id_parts(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end
