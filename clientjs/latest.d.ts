// Type declarations of latest.js.
export { latestWins, LatestWins } from './herald.js';
