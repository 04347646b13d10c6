//! Text as MySQL and MariaDB store it in this schema's binary collation.

use sqlx::error::BoxDynError;
use sqlx::mysql::{MySqlTypeInfo, MySqlValueRef};
use sqlx::{Decode, MySql, Type, TypeInfo};

/// Text as this backend stores it: sqlx reads no column that MySQL marks binary as a
/// `String`, and MySQL marks every column in a binary collation so. This reads any text or
/// binary column whose bytes are UTF-8.
pub(crate) struct Text(pub(crate) String);

impl Type<MySql> for Text {
    fn type_info() -> MySqlTypeInfo {
        <String as Type<MySql>>::type_info()
    }

    fn compatible(ty: &MySqlTypeInfo) -> bool {
        matches!(
            ty.name(),
            "CHAR"
                | "VARCHAR"
                | "TINYTEXT"
                | "TEXT"
                | "MEDIUMTEXT"
                | "LONGTEXT"
                | "BINARY"
                | "VARBINARY"
                | "TINYBLOB"
                | "BLOB"
                | "MEDIUMBLOB"
                | "LONGBLOB"
        )
    }
}

impl<'r> Decode<'r, MySql> for Text {
    fn decode(value: MySqlValueRef<'r>) -> Result<Self, BoxDynError> {
        let bytes = <&[u8] as Decode<MySql>>::decode(value)?;
        Ok(Self(std::str::from_utf8(bytes)?.to_owned()))
    }
}
