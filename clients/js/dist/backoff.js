/**
 * The wait before attempt `attempt` (0 for the first retry): min(max, base * 2^attempt), of which
 * the second half is random ("equal jitter"). Never 0, so a refusing service is never hammered;
 * random, so the tabs a restart closed at once do not all come back in the same millisecond.
 */
export function backoffDelay(attempt, { baseMs = 500, maxMs = 30_000 } = {}, random = Math.random) {
    const ceiling = Math.min(maxMs, baseMs * 2 ** Math.max(0, Math.min(attempt, 30)));
    return ceiling / 2 + random() * (ceiling / 2);
}
