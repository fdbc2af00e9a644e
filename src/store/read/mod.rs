//! Beside the flow, the operator's views: read models of the store.
//!
//! What the operator page (`web`) and the command line (`cli`) read: the
//! conversation list (`listing`), one conversation read back
//! (`conversations`), the overview (`overview`), a conversation's chart
//! (`requests`), a page of a longer list (`page`). Reads only: every row
//! they show was written by the write path (`store::write`), whose row
//! types they decode.

mod conversations;
mod listing;
mod overview;
mod page;
mod requests;

pub use conversations::{
    Branch, ConversationDetail, ConversationSummary, DetailQuery, Figures, MessageNode,
};
pub use listing::{ListQuery, SortBy, MAX_PAGE};
pub use overview::{LearnedWindow, MessageText, Overview};
pub use page::Listed;
pub use requests::RequestPoint;
