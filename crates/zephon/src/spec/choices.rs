//! The spec's choices: keys whose value is one of a few names (`order = "shuffled"`), each a
//! unit enum read from its snake_case name, so that a misspelt value is an error naming the
//! key, its line and the names it may take.

use serde::Deserialize;

/// Declares a spec choice: a unit enum read from its snake_case name, so that a misspelt value
/// is an error naming the key, its line and the names it may take.
macro_rules! choice {
    ($(#[$doc:meta])* $name:ident { $($(#[$vattr:meta])* $variant:ident),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vattr])* $variant),+
        }
    };
}

choice! {
    /// `[storage] eviction`.
    EvictionSpec {
        /// The block read furthest ahead by the schedule.
        NextUse,
        /// The least recently used block.
        Lru
    }
}

choice! {
    /// `[chat] loss_on`.
    ChatLossOn {
        /// Every assistant turn.
        AssistantTurns,
        /// The last assistant turn.
        LastAssistantTurn,
        /// Every token.
        Everything
    }
}

choice! {
    /// `[chat] assistant_span`.
    ChatAssistantSpan {
        /// What the model generates after the generation prompt, where the template is
        /// prefix-preserving; else the content and the end-of-turn token.
        Generated,
        /// The content and the end-of-turn token.
        Content
    }
}

choice! {
    /// `[chat] long_conversations`.
    ChatLongConversations {
        /// Pieces cut at turn boundaries.
        SplitAtTurns,
        /// The first tokens.
        Truncate,
        /// Left out.
        Skip
    }
}

choice! {
    /// `[source] order`: the order rows are read in within each dataset.
    SourceOrder {
        /// Shard by shard, row by row.
        Sequential,
        /// Rows shuffled within each shard (the default).
        Shuffled,
        /// Blocks of `block_size` rows, shuffled.
        Blocks,
        /// One permutation over every row of the dataset.
        Global,
    }
}

choice! {
    /// `[tokenize] long_documents`.
    TokenizeLongDocuments {
        /// Keep documents whole.
        Keep,
        /// Cut them into pieces of `max_tokens`.
        Split,
        /// Keep the first `max_tokens`.
        Truncate,
    }
}

choice! {
    /// `[pack] algorithm`.
    PackAlgorithm {
        /// Concatenate and cut at row boundaries.
        Wrap,
        /// The oldest open row with room.
        FirstFit,
        /// The fullest open row with room.
        BestFit,
        /// Each document alone in a padded row.
        OnePerRow,
    }
}

choice! {
    /// `[pack] long_documents`.
    PackLongDocuments {
        /// Cut a document longer than a row into pieces.
        Split,
        /// Keep its first `seq_len` tokens.
        Truncate,
    }
}

choice! {
    /// `[pack] end_of_data`.
    PackEndOfData {
        /// Emit the open rows as they are.
        KeepPieces,
        /// Lay their pieces out into full rows.
        FillRows,
    }
}

choice! {
    /// `[images] preset`.
    ImagePreset {
        /// 336 px centre crop, ViT patches of 14, 576 tokens.
        Llava,
        /// Dynamic resolution, Qwen2-VL patches.
        Qwen2Vl,
    }
}

choice! {
    /// `[images] fit`.
    ImageFit {
        /// Resize the short side, crop the centre.
        CenterCrop,
        /// Pad to a square with the mean colour, then resize.
        PadToSquare,
        /// Resize to the square, ignoring the aspect ratio.
        Stretch,
    }
}

choice! {
    /// `[images] filter`.
    ImageFilter {
        /// Bilinear.
        Bilinear,
        /// Bicubic (Catmull-Rom).
        Bicubic,
        /// Lanczos, three lobes.
        Lanczos3,
    }
}

choice! {
    /// `[images] normalize`.
    ImageNormalize {
        /// OpenAI CLIP's mean and std.
        Clip,
        /// ImageNet's mean and std.
        Imagenet,
        /// Mean and std 0.5.
        Half,
    }
}

choice! {
    /// `[images] dtype`.
    ImageDtype {
        /// IEEE binary32.
        F32,
        /// bfloat16.
        Bf16,
        /// IEEE binary16.
        F16,
    }
}

choice! {
    /// `[images] layout`.
    ImageLayout {
        /// ViT patches (`patch` sets their side).
        Vit,
        /// Qwen2-VL's patch layout.
        Qwen2Vl,
        /// The whole image, channel first.
        Chw,
    }
}

choice! {
    /// `[images] backend`: the JPEG decoder.
    JpegDecoder {
        /// zune-jpeg (pure Rust, the default).
        Zune,
        /// libjpeg-turbo (the `turbojpeg` build).
        #[serde(rename = "libjpeg-turbo")]
        LibjpegTurbo,
    }
}
